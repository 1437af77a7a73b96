//===- CudaBackend.h - The CUDA backend -------------------------*- C++ -*-===//
//
// Every kernel of the CPU reference on an NVIDIA GPU: GEMMs through cuBLAS
// (fp32, or bf16 inputs with fp32 accumulation and fp32 results; parameters
// and activations stay fp32 as master copies), the elementwise and row
// kernels of runtime/backends/cuda (their per-element math is shared with the CPU
// kernels and tested on the CPU), causal attention, MoE routing, AdamW.
//
// Each backend owns a compute stream and a communication stream on one
// device; several backends may share a device (single-GPU multi-rank mode).
// Built only when CUDA is found (PIPEFORGE_HAVE_CUDA); creating one on a
// machine without a GPU returns an error, never a crash.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_CUDABACKEND_H
#define PIPEFORGE_RT_CUDABACKEND_H

#include "pipeforge/rt/Backend.h"

#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

enum class GemmPrecision : uint8_t {
  FP32, ///< fp32 inputs, fp32 accumulation (no TF32)
  BF16  ///< bf16 inputs (rounded from the fp32 values), fp32 accumulation
};

struct CudaBackendOptions {
  int device = 0;
  GemmPrecision precision = GemmPrecision::FP32;
};

/// The number of usable CUDA devices; 0 (with the reason in `why`) when
/// there is no driver, no device, or the runtime fails.
int cudaDeviceCount(std::string *why = nullptr);

/// A backend on `o.device`; an error naming the device and the CUDA error
/// when it cannot be created.
Expected<std::unique_ptr<Backend>>
createCudaBackend(const CudaBackendOptions &o = {});

/// The op mnemonics the CUDA backend runs (the CPU backend's set).
std::vector<std::string> cudaBackendOps();

/// Parses "fp32" / "bf16".
Expected<GemmPrecision> parseGemmPrecision(const std::string &s);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_CUDABACKEND_H
