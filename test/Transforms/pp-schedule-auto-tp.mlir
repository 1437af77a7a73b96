// The automatic scheduler on a tensor-parallel model: with
// tp-bytes-per-time the stages' collectives add to F and B
// (StageCostModelTest checks the numbers); the bandwidth needs the FLOP
// rate in the same time unit.
// RUN: pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=2" --pp-partition="stages=2" --pp-split-backward --pp-schedule="kind=auto microbatches=4 flops-per-time=1e9 tp-bytes-per-time=1e6" --pp-verify-schedule | FileCheck %s
// RUN: not pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=2" --pp-partition="stages=2" --pp-split-backward --pp-schedule="kind=auto microbatches=4 tp-bytes-per-time=1e6" -o /dev/null 2>&1 | FileCheck %s --check-prefix=ERR
// CHECK: pp.schedule "auto" ranks 2 stages 2 microbatches 4
// ERR: error: tp-bytes-per-time must be >= 0 and needs flops-per-time > 0 (both in one time unit)
