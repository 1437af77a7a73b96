// RUN: pipeforge-opt --pp-schedule="kind=dualpipe ranks=2 microbatches=4" --pp-insert-comm --pp-fuse-overlap="layers=2" %S/Inputs/empty.mlir | FileCheck %s
// RUN: pipeforge-opt --pp-schedule="kind=dualpipe ranks=2 microbatches=4" --pp-insert-comm --pp-fuse-overlap="layers=2" %S/Inputs/empty.mlir | pipeforge-opt --pp-verify-schedule | FileCheck %s --check-prefix=ROUNDTRIP

// DualPipe on 2 ranks, 2 MoE layers per stage (attn, dispatch, mlp,
// combine). Rank 0's receives are posted at the program start (one per
// channel) or right after the previous wait of their channel; the wait of
// F stage 0 mb 1 copy 1 sinks past the BW that does not need it.
// CHECK-LABEL: pp.rank_program 0
// CHECK-NEXT:    pp.recv_post BW stage 1 mb 0 from 1
// CHECK-NEXT:    pp.recv_post F stage 0 mb 0 copy 1 from 1
// CHECK-NEXT:    pp.compute F stage 0 mb 0
// CHECK-NEXT:    pp.send F stage 0 mb 0 to 1
// CHECK-NEXT:    pp.recv_wait F stage 0 mb 0 copy 1 from 1
// CHECK-NEXT:    pp.recv_post F stage 0 mb 1 copy 1 from 1
// CHECK-NEXT:    pp.compute F stage 1 mb 0 copy 1
// CHECK-NEXT:    pp.compute F stage 0 mb 1
// CHECK-NEXT:    pp.send F stage 0 mb 1 to 1
// CHECK-NEXT:    pp.compute BW stage 1 mb 0 copy 1
// CHECK-NEXT:    pp.recv_wait F stage 0 mb 1 copy 1 from 1

// The fused pair: F of copy 1 (layers 0, 1) with BW of copy 0 (layers 1, 0),
// in DeepSeek's per-layer order; each all-to-all starts before and is
// waited after a compute of the other member, except combine(F).
// CHECK:         pp.overlap attributes {b_layers = {{\[\["attn", "dispatch", "mlp", "combine"\], \["attn", "dispatch", "mlp", "combine"\]\]}}, f_layers = {{.*}}, pp.exposed_comm = 2 : i64} {
// CHECK-NEXT:      pp.compute F stage 1 mb 1 copy 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 0
// layer step 0: F layer 0, B/W layer 1
// CHECK-NEXT:      pp.comm_start B combine layer 1
// CHECK-NEXT:      pp.component F attn layer 0
// CHECK-NEXT:      pp.comm_wait B combine layer 1
// CHECK-NEXT:      pp.component B mlp layer 1
// CHECK-NEXT:      pp.comm_start F dispatch layer 0
// CHECK-NEXT:      pp.comm_start B dispatch layer 1
// CHECK-NEXT:      pp.component W mlp layer 1
// CHECK-NEXT:      pp.comm_wait F dispatch layer 0
// CHECK-NEXT:      pp.component F mlp layer 0
// CHECK-NEXT:      pp.comm_wait B dispatch layer 1
// CHECK-NEXT:      pp.component B attn layer 1
// CHECK-NEXT:      pp.component W attn layer 1
// CHECK-NEXT:      pp.comm_start F combine layer 0
// layer step 1: F layer 1, B/W layer 0
// CHECK-NEXT:      pp.comm_start B combine layer 0
// CHECK-NEXT:      pp.comm_wait F combine layer 0
// CHECK-NEXT:      pp.component F attn layer 1
// CHECK-NEXT:      pp.comm_wait B combine layer 0
// CHECK-NEXT:      pp.component B mlp layer 0
// CHECK-NEXT:      pp.comm_start F dispatch layer 1
// CHECK-NEXT:      pp.comm_start B dispatch layer 0
// CHECK-NEXT:      pp.component W mlp layer 0
// CHECK-NEXT:      pp.comm_wait F dispatch layer 1
// CHECK-NEXT:      pp.component F mlp layer 1
// CHECK-NEXT:      pp.comm_wait B dispatch layer 0
// CHECK-NEXT:      pp.component B attn layer 0
// CHECK-NEXT:      pp.component W attn layer 0
// CHECK-NEXT:      pp.comm_start F combine layer 1
// CHECK-NEXT:      pp.comm_wait F combine layer 1
// CHECK-NEXT:    }

// The fused schedule re-parses and passes --pp-verify-schedule unchanged.
// ROUNDTRIP: pp.comm_start B combine layer 1
