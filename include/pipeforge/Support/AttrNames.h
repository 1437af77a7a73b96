//===- AttrNames.h - Names of the discardable nn.* / pp.* attributes -*- C++ -*-===//
//
// The attributes that carry facts between the steps of the flow
// (docs/architecture.md): set once upstream, read downstream. One constant
// per name, so a typo is a compile error rather than a silently missing fact.
// Plain LLVM ADT: usable from the schedule library's adapters, the passes,
// the importer and the lowering alike.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SUPPORT_ATTRNAMES_H
#define PIPEFORGE_SUPPORT_ATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace pipeforge::attrs {

//===--- Model facts: on func.func @model (the importer), copied to
//===--- pp.pipeline by pp-partition ---------------------------------------===//
/// The model's name (the config file's stem).
inline constexpr llvm::StringLiteral kModelName = "nn.model_name";
/// Rows of the token embedding table.
inline constexpr llvm::StringLiteral kVocabSize = "nn.vocab_size";
/// Tokens per sequence of the run the module was imported for.
inline constexpr llvm::StringLiteral kSeqLen = "nn.seq_len";
/// The Hugging Face config.json the model was imported from (its text):
/// the lowering carries it into the program (ModelInfo::hfConfig), where
/// the runtime reads a Hugging Face checkpoint's layout from it and writes
/// it back beside exported weights (docs/huggingface.md). Absent on
/// hand-written IR.
inline constexpr llvm::StringLiteral kHFConfig = "nn.hf_config";

//===--- On @model's arguments and ops ------------------------------------===//
inline constexpr llvm::StringLiteral kNNRole = "nn.role"; ///< tokens|targets|param
inline constexpr llvm::StringLiteral kNNName = "nn.name"; ///< parameter name
inline constexpr llvm::StringLiteral kNNInit = "nn.init"; ///< initialiser spec
inline constexpr llvm::StringLiteral kNNLayer = "nn.layer"; ///< layer index
/// On a parameter argument: the nn.name of the parameter it is tied to (the
/// LM head of a model with tied embeddings names the token embedding): one
/// logical tensor kept as two copies with the same shape, the same initial
/// values and the sum of both gradients (docs/model-ir.md).
inline constexpr llvm::StringLiteral kNNTied = "nn.tied";

//===--- Tensor parallelism (--nn-shard-tensor, docs/tensor-parallel.md) --===//
/// On the model function: the tensor-parallel group size (i64), and a unit
/// attribute when activations outside the sharded layers are split along
/// the sequence (sequence parallelism).
inline constexpr llvm::StringLiteral kTensorParallel = "nn.tensor_parallel";
inline constexpr llvm::StringLiteral kSequenceParallel = "nn.sequence_parallel";
/// On a parameter argument: the dimension split over the group (i64); the
/// argument's type is one rank's shard. Absent: replicated.
inline constexpr llvm::StringLiteral kTPDim = "nn.tp_dim";
/// On a replicated parameter argument whose gradient each rank computes
/// from its own share of the tokens (sequence parallelism): the gradients
/// are summed over the group before the optimizer step.
inline constexpr llvm::StringLiteral kTPReduceGrad = "nn.tp_reduce_grad";

//===--- The partition (pp-partition) -------------------------------------===//
/// On the pp.pipeline: the largest stage cost over the mean (f64).
inline constexpr llvm::StringLiteral kPPImbalance = "pp.imbalance";
/// On each pp.stage: its nn.layer ids (array<i64>) and its F + B + W FLOPs
/// (i64).
inline constexpr llvm::StringLiteral kPPLayers = "pp.layers";
inline constexpr llvm::StringLiteral kPPCost = "pp.cost";

//===--- Recomputation (pp-recompute, docs/split-backward.md) -------------===//
/// On a pp.stage: "full" or "selective"; for selective, the forward FLOPs of
/// the ops it recomputes (f64), which the stage cost model charges to B.
inline constexpr llvm::StringLiteral kPPRecompute = "pp.recompute";
inline constexpr llvm::StringLiteral kPPRecomputeFlops = "pp.recompute_flops";

//===--- Fused overlapped pairs (pp-fuse-overlap, docs/passes.md) ---------===//
/// On a fused pp.overlap: the component order it runs (the pass's `order`
/// syntax), the times the search predicted ({default, fused, unfused}, cost
/// units), and how many all-to-alls no compute of the other member hides
/// (i64).
inline constexpr llvm::StringLiteral kPPOrder = "pp.order";
inline constexpr llvm::StringLiteral kPPPredicted = "pp.predicted";
inline constexpr llvm::StringLiteral kPPExposedComm = "pp.exposed_comm";

//===--- On stage functions (pp-partition, pp-split-backward) -------------===//
inline constexpr llvm::StringLiteral kPPRole = "pp.role";
inline constexpr llvm::StringLiteral kPPArg = "pp.arg";
inline constexpr llvm::StringLiteral kPPResult = "pp.result";
inline constexpr llvm::StringLiteral kPPStash = "pp.stash";
inline constexpr llvm::StringLiteral kPPWStash = "pp.wstash";
/// pp-split-components: an op's component kind and layer.
inline constexpr llvm::StringLiteral kPPComponent = "pp.component";
inline constexpr llvm::StringLiteral kPPLayer = "pp.layer";
/// pp-split-components: the moe ops' span, and a stage's per-layer lists.
inline constexpr llvm::StringLiteral kPPSpan = "pp.span";
inline constexpr llvm::StringLiteral kPPComponents = "pp.components";

//===--- Program preparation (--pp-assign-buffers, --pp-component-ranges;
//===--- docs/program-format.md) -----------------------------------------===//
/// On a stage function: each buffer's byte size (array<i64>).
inline constexpr llvm::StringLiteral kPPBuffers = "pp.buffers";
/// On a stage function's argument: its buffer (i64); on an op of its body:
/// one buffer per result (array<i64>).
inline constexpr llvm::StringLiteral kPPBuffer = "pp.buffer";
/// On a stage function: its component ranges over the kernels (the ops of
/// its body), [{kind, layer, begin, end}].
inline constexpr llvm::StringLiteral kPPComponentRanges =
    "pp.component_ranges";

} // namespace pipeforge::attrs

#endif // PIPEFORGE_SUPPORT_ATTRNAMES_H
