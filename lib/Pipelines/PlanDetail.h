//===- PlanDetail.h - The plan phase's helpers shared by its files -*- C++ -*-===//
//
// Internal to lib/Pipelines: what CompilePipeline.cpp (the options, the auto
// placement, the pipeline) and DeviceMemory.cpp (the --device-memory budget)
// both use.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_LIB_PIPELINES_PLANDETAIL_H
#define PIPEFORGE_LIB_PIPELINES_PLANDETAIL_H

#include "pipeforge/Pipelines/CompilePipeline.h"

#include <string>

namespace pipeforge::pipelines::detail {

/// The layers of @model, as the cost analysis groups them (nn.layer ids).
int countLayers(mlir::ModuleOp module);

/// The passes before pp-schedule (shard, partition, split, recompute).
void addStagePasses(mlir::OpPassManager &pm, const CompileOptions &o,
                    int stages, const std::string &placement);

/// The bytes of one activation element the compile driver costs stashes
/// with: 4, what pipeforge-run stores (float32 on every backend), so that a
/// byte --mem-limit or --device-memory is pipeforge-run's bytes. (The
/// passes alone default to 2, the papers' mixed-precision activations.)
inline unsigned activationBytesPerElement(const CompileOptions &) { return 4; }

/// --device-memory (a no-op without it): chooses the ZeRO level (the
/// requested one, or the lowest of 0-3 that fits) and the activation limit
/// the budget leaves after the model state; `note` names both.
Status fitDeviceMemory(mlir::ModuleOp module, CompileOptions &o,
                       std::string &note);

} // namespace pipeforge::pipelines::detail

#endif
