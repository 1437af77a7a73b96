// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{'pp.schedule' op expects at least one rank, got 0}}
pp.schedule "x" ranks 0 stages 1 microbatches 1 placement [0] {}

// -----

// expected-error @+1 {{'pp.schedule' op expects at least one stage, got 0}}
pp.schedule "x" ranks 1 stages 0 microbatches 1 placement [0] {}

// -----

// The stage of every work is packed in 26 bits (sched::Work).
// expected-error @+1 {{'pp.schedule' op supports at most 33554432 stages, got 33554433}}
pp.schedule "x" ranks 1 stages 33554433 microbatches 1 placement [0] {}

// -----

// expected-error @+1 {{'pp.schedule' op expects at least one microbatch, got 0}}
pp.schedule "x" ranks 1 stages 1 microbatches 0 placement [0] {}

// -----

// expected-error @+1 {{'pp.schedule' op placement lists 3 ranks; expected 2 (one model copy) or 4 (two copies)}}
pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1, 1] {}

// -----

// expected-error @+1 {{'pp.schedule' op placement puts stage 1 on rank 2, out of range [0, 2)}}
pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 2] {}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 1 placement [0] {
  // expected-error @+1 {{'pp.compute' op is not allowed directly inside 'pp.schedule' (only 'pp.rank_program')}}
  pp.compute F stage 0 mb 0
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {}
  // expected-error @+1 {{'pp.rank_program' op duplicates rank 0}}
  pp.rank_program 0 {}
}

// -----

// expected-error @+1 {{'pp.schedule' op has 1 rank programs, expected 2}}
pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {}
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 1 placement [0] {
  // expected-error @+1 {{'pp.rank_program' op rank 1 out of range [0, 1)}}
  pp.rank_program 1 {}
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'func.func' op is not a schedule action}}
    func.func private @f()
  }
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.compute' op stage 1 out of range [0, 1)}}
    pp.compute F stage 1 mb 0
  }
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.compute' op attribute 'mb' failed to satisfy constraint: 32-bit signless integer attribute whose value is non-negative}}
    pp.compute F stage 0 mb -1
  }
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.compute' op microbatch 2 out of range [0, 2)}}
    pp.compute B stage 0 mb 2
  }
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.compute' op copy 1 out of range: the schedule has 1 model copy}}
    pp.compute W stage 0 mb 0 copy 1
  }
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.compute' op stage 1 is placed on rank 1, not on rank 0}}
    pp.compute F stage 1 mb 0
  }
  pp.rank_program 1 {}
}

// -----

// expected-error @+1 {{'pp.compute' op must be inside a 'pp.schedule'}}
pp.compute F stage 0 mb 0

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'kind' [F, B, W, BW]}}
    pp.compute X stage 0 mb 0
  }
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.overlap' op expects exactly two 'pp.compute' ops (an F, then a B or BW)}}
    pp.overlap {
      pp.compute F stage 0 mb 1
    }
  }
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.overlap' op expects its first member to be an F, got B}}
    pp.overlap {
      pp.compute B stage 0 mb 1
      pp.compute BW stage 0 mb 0
    }
  }
}

// -----

pp.schedule "x" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.overlap' op expects its second member to be a B or BW, got W}}
    pp.overlap {
      pp.compute F stage 0 mb 1
      pp.compute W stage 0 mb 0
    }
  }
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.send' op cannot carry the output of a W (weight gradients stay on their rank)}}
    pp.send W stage 0 mb 0 to 1
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.send' op peer 2 out of range [0, 2)}}
    pp.send F stage 0 mb 0 to 2
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {}
  pp.rank_program 1 {
    // expected-error @+1 {{'pp.recv' op peer 1 is the rank itself}}
    pp.recv F stage 0 mb 0 from 1
  }
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {}
  pp.rank_program 1 {
    // expected-error @+1 {{'pp.recv' op stage 2 out of range [0, 2)}}
    pp.recv F stage 2 mb 0 from 0
  }
}

// -----

// expected-error @+1 {{'pp.grad_reduce' op must be inside a 'pp.schedule'}}
pp.grad_reduce with 1

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.grad_reduce' op peer 2 out of range [0, 2)}}
    pp.grad_reduce with 2
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.grad_reduce' op peer 0 is the rank itself}}
    pp.grad_reduce with 0
  }
  pp.rank_program 1 {}
}

// -----

pp.schedule "x" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    // expected-error @+1 {{'pp.grad_reduce' op needs a schedule with two model copies}}
    pp.grad_reduce with 1
  }
  pp.rank_program 1 {}
}

// -----

// expected-error @+1 {{'pp.rank_program' op expects parent op 'pp.schedule'}}
pp.rank_program 0 {}
