// RUN: pipeforge-opt %s | pipeforge-opt | FileCheck %s
// RUN: pipeforge-opt %s -mlir-print-op-generic | pipeforge-opt | FileCheck %s

// The schedule level: per-rank programs of compute, overlapped pairs and
// messages. DualPipe on 2 ranks: two copies, so `placement` lists 4 ranks.

// CHECK: pp.schedule "dualpipe" ranks 2 stages 2 microbatches 1 placement [0, 1, 1, 0] {
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 1 placement [0, 1, 1, 0] {
  // CHECK-NEXT: pp.rank_program 0 {
  pp.rank_program 0 {
    // ZeRO-3's gather and release of a stage's parameters (copy 0 omitted).
    // CHECK-NEXT: pp.unshard stage 0
    pp.unshard stage 0
    // CHECK-NEXT: pp.unshard stage 1 copy 1
    pp.unshard stage 1 copy 1
    // CHECK-NEXT: pp.compute F stage 0 mb 0
    pp.compute F stage 0 mb 0
    // CHECK-NEXT: pp.send F stage 0 mb 0 to 1
    pp.send F stage 0 mb 0 to 1
    // CHECK-NEXT: pp.recv F stage 0 mb 0 copy 1 from 1
    pp.recv F stage 0 mb 0 copy 1 from 1
    // CHECK-NEXT: pp.compute F stage 1 mb 0 copy 1
    pp.compute F stage 1 mb 0 copy 1
    // CHECK-NEXT: pp.compute B stage 1 mb 0 copy 1
    pp.compute B stage 1 mb 0 copy 1
    // CHECK-NEXT: pp.send B stage 1 mb 0 copy 1 to 1
    pp.send B stage 1 mb 0 copy 1 to 1
    // CHECK-NEXT: pp.recv BW stage 1 mb 0 from 1
    pp.recv BW stage 1 mb 0 from 1
    // CHECK-NEXT: pp.compute BW stage 0 mb 0
    pp.compute BW stage 0 mb 0
    // CHECK-NEXT: pp.reshard stage 0
    pp.reshard stage 0
    // CHECK-NEXT: pp.compute W stage 1 mb 0 copy 1
    pp.compute W stage 1 mb 0 copy 1
    // CHECK-NEXT: pp.reshard stage 1 copy 1
    pp.reshard stage 1 copy 1
    // CHECK-NEXT: pp.grad_reduce with 1
    pp.grad_reduce with 1
  }
  // CHECK: pp.rank_program 1 {
  pp.rank_program 1 {
    pp.compute F stage 0 mb 0 copy 1
    pp.send F stage 0 mb 0 copy 1 to 0
    pp.recv F stage 0 mb 0 from 0
    pp.compute F stage 1 mb 0
    pp.compute BW stage 1 mb 0
    pp.send BW stage 1 mb 0 to 0
    pp.recv B stage 1 mb 0 copy 1 from 0
    pp.compute BW stage 0 mb 0 copy 1
    // CHECK: pp.grad_reduce with 0
    pp.grad_reduce with 0
  }
}

// An overlapped F&B pair: the forward of microbatch 1 runs interleaved with
// the full backward of microbatch 0. (Op verifiers check structure only;
// whole-schedule semantics are --pp-verify-schedule's job.)

// CHECK: pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    // CHECK: pp.overlap {
    // CHECK-NEXT: pp.compute F stage 0 mb 1
    // CHECK-NEXT: pp.compute BW stage 0 mb 0
    // CHECK-NEXT: }
    pp.overlap {
      pp.compute F stage 0 mb 1
      pp.compute BW stage 0 mb 0
    }
    pp.compute BW stage 0 mb 1
  }
}
