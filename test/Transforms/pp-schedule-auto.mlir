// --pp-schedule kind=auto: the automatic scheduler on the cost options under
// a memory limit (M_B units or <k>p), linear or v placement.
// RUN: pipeforge-opt %s --pp-schedule="kind=auto ranks=2 microbatches=3 mem-limit=2p time-limit=2 placement=linear" | FileCheck %s
// Without a pipeline, placement=any (the default) compares both placements
// and the handcrafted orders as pipeforge-sched --schedule auto does: the V
// placement wins here (a V stage takes half of a rank's tf/tb/tw).
// RUN: pipeforge-opt %s --pp-schedule="kind=auto ranks=2 microbatches=3 mem-limit=2p time-limit=2" | FileCheck %s --check-prefix=ANY
// ANY: pp.schedule "auto" ranks 2 stages 4 microbatches 3 placement [0, 1, 1, 0] {
// ANY-NOT: pp.send
// RUN: pipeforge-opt %s --pp-schedule="kind=auto ranks=2 microbatches=2 mem-limit=1p placement=v time-limit=0" | FileCheck %s --check-prefix=V
// RUN: not pipeforge-opt %s --pp-schedule="kind=auto ranks=4 microbatches=4 mem-limit=0.5" 2>&1 | FileCheck %s --check-prefix=ERR

// CHECK: pp.schedule "auto" ranks 2 stages 2 microbatches 3 placement [0, 1] {
// CHECK-NEXT: pp.rank_program 0 {
// CHECK-NEXT: pp.compute F stage 0 mb 0
// CHECK: pp.compute W stage 1 mb 2

// V: pp.schedule "auto" ranks 2 stages 4 microbatches 2 placement [0, 1, 1, 0] {

// ERR: cannot build schedule 'auto': no placement fits: auto on the linear placement: memory limit 0.5 is impossible
module {}
