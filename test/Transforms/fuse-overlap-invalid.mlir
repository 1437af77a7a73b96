// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics -o /dev/null

// Hand-broken fused pairs: the pp.overlap verifier (which --pp-fuse-overlap
// runs on its result) rejects each. One MoE layer per stage: F runs attn,
// dispatch, mlp, combine; B the reverse; W (the pair's backward is a BW)
// after the B of the same component.

// Component missing: no pp.component F mlp.
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    // expected-error @+1 {{component program misses pp.component F mlp layer 0}}
    pp.overlap attributes {f_layers = [["attn", "dispatch", "mlp", "combine"]], b_layers = [["attn", "dispatch", "mlp", "combine"]]} {
      pp.compute F stage 0 mb 1
      pp.compute BW stage 1 mb 0 copy 1
      pp.comm_start B combine layer 0
      pp.component F attn layer 0
      pp.comm_wait B combine layer 0
      pp.component B mlp layer 0
      pp.comm_start F dispatch layer 0
      pp.comm_start B dispatch layer 0
      pp.component W mlp layer 0
      pp.comm_wait F dispatch layer 0
      pp.comm_wait B dispatch layer 0
      pp.component B attn layer 0
      pp.component W attn layer 0
      pp.comm_start F combine layer 0
      pp.comm_wait F combine layer 0
    }
  }
  pp.rank_program 1 {
  }
}

// -----

// Component duplicated.
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    pp.overlap attributes {f_layers = [["attn", "mlp"]], b_layers = [["attn", "mlp"]]} {
      pp.compute F stage 0 mb 1
      pp.compute B stage 1 mb 0 copy 1
      pp.component F attn layer 0
      pp.component B mlp layer 0
      pp.component F mlp layer 0
      // expected-error @+1 {{'pp.component' op duplicates pp.component F mlp layer 0}}
      pp.component F mlp layer 0
      pp.component B attn layer 0
    }
  }
  pp.rank_program 1 {
  }
}

// -----

// Out of dependency order: the backward runs layer 1 before layer 0, so B
// attn of layer 0 cannot come before B mlp of layer 1.
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    pp.overlap attributes {f_layers = [["attn", "mlp"], ["attn", "mlp"]], b_layers = [["attn", "mlp"], ["attn", "mlp"]]} {
      pp.compute F stage 0 mb 1
      pp.compute B stage 1 mb 0 copy 1
      pp.component F attn layer 0
      pp.component B mlp layer 1
      pp.component F mlp layer 0
      pp.component B attn layer 1
      pp.component F attn layer 1
      // expected-error @+1 {{'pp.component' op is out of dependency order: the backward member runs its layers in reverse order, so pp.component B mlp layer 0 comes first}}
      pp.component B attn layer 0
      pp.component F mlp layer 1
      pp.component B mlp layer 0
    }
  }
  pp.rank_program 1 {
  }
}

// -----

// A W before its B.
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    pp.overlap attributes {f_layers = [["attn", "mlp"]], b_layers = [["attn", "mlp"]]} {
      pp.compute F stage 0 mb 1
      pp.compute BW stage 1 mb 0 copy 1
      pp.component F attn layer 0
      // expected-error @+1 {{'pp.component' op runs before its pp.component B mlp layer 0}}
      pp.component W mlp layer 0
      pp.component B mlp layer 0
      pp.component F mlp layer 0
      pp.component B attn layer 0
      pp.component W attn layer 0
    }
  }
  pp.rank_program 1 {
  }
}

// -----

// Wait before its start.
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    pp.overlap attributes {f_layers = [["attn", "dispatch", "mlp"]], b_layers = [["mlp"]]} {
      pp.compute F stage 0 mb 1
      pp.compute B stage 1 mb 0 copy 1
      pp.component F attn layer 0
      // expected-error @+1 {{'pp.comm_wait' op waits before its pp.comm_start F dispatch layer 0}}
      pp.comm_wait F dispatch layer 0
      pp.component B mlp layer 0
      pp.comm_start F dispatch layer 0
      pp.component F mlp layer 0
    }
  }
  pp.rank_program 1 {
  }
}

// -----

// Wait missing.
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    pp.overlap attributes {f_layers = [["attn", "dispatch", "mlp"]], b_layers = [["mlp"]]} {
      pp.compute F stage 0 mb 1
      pp.compute B stage 1 mb 0 copy 1
      pp.component F attn layer 0
      // expected-error @+1 {{'pp.comm_start' op is never waited for: no later pp.comm_wait F dispatch layer 0}}
      pp.comm_start F dispatch layer 0
      pp.component B mlp layer 0
      pp.component F mlp layer 0
    }
  }
  pp.rank_program 1 {
  }
}

// -----

// A component the stage does not have.
pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
  pp.rank_program 0 {
    pp.overlap attributes {f_layers = [["attn", "mlp"]], b_layers = [["mlp"]]} {
      pp.compute F stage 0 mb 1
      pp.compute B stage 1 mb 0 copy 1
      pp.component F attn layer 0
      // expected-error @+1 {{'pp.comm_start' op is not a component of the pair: layer 0 of the F member's stage has no dispatch all-to-all (see f_layers / b_layers)}}
      pp.comm_start F dispatch layer 0
      pp.component B mlp layer 0
      pp.component F mlp layer 0
    }
  }
  pp.rank_program 1 {
  }
}

// -----

// A split receive waited for but never posted.
pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
  }
  pp.rank_program 1 {
    // expected-error @+1 {{'pp.recv_wait' op waits for a receive that was not posted before it}}
    pp.recv_wait F stage 0 mb 0 from 0
    pp.recv_post F stage 0 mb 0 from 0
  }
}
