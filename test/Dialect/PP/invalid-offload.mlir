// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// pp.offload / pp.reload name the stash of an F of the schedule whose stage
// is placed on the enclosing rank. (Where they stand against the F and its
// B is --pp-verify-schedule's check: pp-verify-schedule-invalid.mlir.)

pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.offload' op stage 2 out of range [0, 2)}}
    pp.offload F stage 2 mb 0
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.reload' op microbatch 1 out of range [0, 1)}}
    pp.reload F stage 0 mb 1
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.offload' op copy 1 out of range: the schedule has 1 model copy}}
    pp.offload F stage 0 mb 0 copy 1
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.offload' op stage 1 is placed on rank 1, not on rank 0: a stash moves only on the rank that made it}}
    pp.offload F stage 1 mb 0
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "dualpipe" ranks 2 stages 2 microbatches 1 placement [0, 1, 1, 0] {
  pp.rank_program 0 {}
  pp.rank_program 1 {
    // expected-error @+1 {{'pp.reload' op stage 1 of copy 1 is placed on rank 0, not on rank 1}}
    pp.reload F stage 1 mb 0 copy 1
  }
}

// -----

// expected-error @+1 {{'pp.offload' op must be inside a 'pp.schedule'}}
pp.offload F stage 0 mb 0
