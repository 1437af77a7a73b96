// RUN: pipeforge-opt --pp-schedule="kind=dualpipe ranks=2 microbatches=4" --pp-insert-comm --pp-fuse-overlap="layers=1" %S/Inputs/empty.mlir | FileCheck %s --check-prefix=DEFAULT
// RUN: pipeforge-opt --pp-schedule="kind=dualpipe ranks=2 microbatches=4" --pp-insert-comm --pp-fuse-overlap="layers=1 search=true ta2a=1.5 tf=2 tb=2 tw=2 attn-share=0.25" %S/Inputs/empty.mlir | FileCheck %s
// RUN: pipeforge-opt --pp-schedule="kind=dualpipe ranks=2 microbatches=4" --pp-insert-comm --pp-fuse-overlap="layers=1 search=true ta2a=1.5 tf=2 tb=2 tw=2 attn-share=0.25" %S/Inputs/empty.mlir | pipeforge-opt --pp-verify-schedule | FileCheck %s
// RUN: pipeforge-opt --pp-schedule="kind=dualpipe ranks=2 microbatches=4" --pp-insert-comm --pp-fuse-overlap="layers=1 search=true" %S/Inputs/empty.mlir | FileCheck %s --check-prefix=NOCOMM
// RUN: not pipeforge-opt --pp-schedule="kind=dualpipe ranks=2 microbatches=4" --pp-fuse-overlap="search=true order=attn:F" %S/Inputs/empty.mlir 2>&1 | FileCheck %s --check-prefix=EXCL

// One MoE layer per stage, F&BW pairs; F: attn 0.5, mlp 1.5; BW: attn 0.5,
// mlp 1.5, W attn 0.5, W mlp 1.5; each all-to-all 1.5. DeepSeek's order
// issues combine(F) last: it ends at 7.5, after the compute (7), and the
// program waits for it with no B compute after its start (exposed 1).
// DEFAULT: pp.overlap attributes {{.*}}pp.exposed_comm = 1 : i64} {
// DEFAULT:      pp.component W attn layer 0
// DEFAULT-NEXT: pp.comm_start F combine layer 0
// DEFAULT-NEXT: pp.comm_wait F combine layer 0

// search=true: the fastest order under the cost model (7, optimal: only
// attn(F) can run before the first all-to-all ends at 1.5) starts each
// all-to-all right after what it needs, so combine(F) runs under attn(B)
// and the W parts; no all-to-all is exposed.
// CHECK-LABEL: pp.rank_program 0
// CHECK:       pp.overlap attributes {{.*}}pp.exposed_comm = 0 : i64, pp.order = "combine:B,attn:F,dispatch:F,mlp:B,dispatch:B,mlp:F,combine:F,attn:B,mlp:W,attn:W", pp.predicted = {default = 7.500000e+00 : f64, fused = 7.000000e+00 : f64, unfused = 1.200000e+01 : f64}} {
// CHECK-NEXT:    pp.compute F stage 1 mb 1 copy 1
// CHECK-NEXT:    pp.compute BW stage 0 mb 0
// CHECK-NEXT:    pp.comm_start B combine layer 0
// CHECK-NEXT:    pp.component F attn layer 0
// CHECK-NEXT:    pp.comm_start F dispatch layer 0
// CHECK-NEXT:    pp.comm_wait B combine layer 0
// CHECK-NEXT:    pp.component B mlp layer 0
// CHECK-NEXT:    pp.comm_start B dispatch layer 0
// CHECK-NEXT:    pp.comm_wait F dispatch layer 0
// CHECK-NEXT:    pp.component F mlp layer 0
// CHECK-NEXT:    pp.comm_start F combine layer 0
// CHECK-NEXT:    pp.comm_wait B dispatch layer 0
// CHECK-NEXT:    pp.component B attn layer 0
// CHECK-NEXT:    pp.component W mlp layer 0
// CHECK-NEXT:    pp.component W attn layer 0
// CHECK-NEXT:    pp.comm_wait F combine layer 0
// CHECK-NEXT:  }
// CHECK-LABEL: pp.rank_program 1
// CHECK:       pp.overlap attributes {{.*}}pp.exposed_comm = 0 : i64, pp.order = "combine:B,attn:F,dispatch:F,mlp:B,

// Without all-to-all time (ta2a = 0) nothing beats DeepSeek's order.
// NOCOMM: pp.overlap attributes {{.*}}pp.exposed_comm = 1 : i64, pp.order = "combine:B,attn:F,mlp:B,dispatch:F,dispatch:B,mlp:W,mlp:F,attn:B,attn:W,combine:F", pp.predicted = {default = 3.000000e+00 : f64, fused = 3.000000e+00 : f64, unfused = 3.000000e+00 : f64}}

// EXCL: error: order and search are exclusive
