// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// pp.unshard / pp.reshard name a stage and copy of the schedule that is
// placed on the enclosing rank. (Where they stand against the stage's
// computes is --pp-verify-schedule's check: pp-verify-schedule-invalid.mlir.)

pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.unshard' op stage 2 out of range [0, 2)}}
    pp.unshard stage 2
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.reshard' op copy 1 out of range: the schedule has 1 model copy}}
    pp.reshard stage 0 copy 1
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.unshard' op stage 1 is placed on rank 1, not on rank 0: a rank gathers only the parameters of stages it computes}}
    pp.unshard stage 1
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "dualpipe" ranks 2 stages 2 microbatches 1 placement [0, 1, 1, 0] {
  pp.rank_program 0 {}
  pp.rank_program 1 {
    // expected-error @+1 {{'pp.reshard' op stage 1 of copy 1 is placed on rank 0, not on rank 1}}
    pp.reshard stage 1 copy 1
  }
}

// -----

// expected-error @+1 {{'pp.unshard' op must be inside a 'pp.schedule'}}
pp.unshard stage 0
