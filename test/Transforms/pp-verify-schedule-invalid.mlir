// RUN: pipeforge-opt %s -split-input-file --pp-verify-schedule="mem-limit=1.5" -verify-diagnostics -o /dev/null

// Each case is a hand-broken schedule; the error points at the offending
// action (or at the schedule when the problem is something missing) and
// names the rank and the step.

// Deadlock: both ranks receive first.
pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 1: deadlock: RECV grad BW1.0 <-r1 blocks until rank 1 reaches the matching SEND; rank 1 is blocked at step 0: RECV act F0.0 <-r0}}
    pp.recv BW stage 1 mb 0 from 1
    pp.send F stage 0 mb 0 to 1
    pp.compute BW stage 0 mb 0
  }
  pp.rank_program 1 {
    pp.recv F stage 0 mb 0 from 0
    pp.compute F stage 1 mb 0
    pp.compute BW stage 1 mb 0
    pp.send BW stage 1 mb 0 to 0
  }
}

// -----

// Missing work
// expected-error @+1 {{invalid schedule: rank 0, step 3: missing B0.1 (or BW0.1)}}
pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.compute BW stage 0 mb 0
    pp.compute F stage 0 mb 1
  }
}

// -----

// B before F on same rank
pp.schedule "zb-h1" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{invalid schedule: rank 0, step 0: dependency order: B0.0 needs F0.0 (rank 0, step 1), which runs later on this rank}}
    pp.compute B stage 0 mb 0
    pp.compute F stage 0 mb 0
    pp.compute W stage 0 mb 0
  }
}

// -----

// W twice / BW and B
pp.schedule "zb-h1" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.compute B stage 0 mb 0
    pp.compute W stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 3: W0.0 runs twice; first at rank 0, step 2}}
    pp.compute W stage 0 mb 0
  }
}

// -----

// Missing message
pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.send F stage 0 mb 0 to 1
    pp.compute BW stage 0 mb 0
  }
  pp.rank_program 1 {
    pp.recv F stage 0 mb 0 from 0
    pp.compute F stage 1 mb 0
    pp.compute BW stage 1 mb 0
    // expected-error @+1 {{invalid schedule: rank 1, step 3: unmatched send: rank 0 has no receive for it}}
    pp.send BW stage 1 mb 0 to 0
  }
}

// -----

// FIFO order mismatch
pp.schedule "gpipe" ranks 2 stages 2 microbatches 2 placement [0, 1] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.send F stage 0 mb 0 to 1
    pp.compute F stage 0 mb 1
    pp.send F stage 0 mb 1 to 1
    pp.recv BW stage 1 mb 0 from 1
    pp.compute BW stage 0 mb 0
    pp.recv BW stage 1 mb 1 from 1
    pp.compute BW stage 0 mb 1
  }
  pp.rank_program 1 {
    // expected-error @+1 {{invalid schedule: rank 1, step 0: FIFO mismatch on channel r0->r1: receive #0 is RECV act F0.1 <-r0 but send #0 is SEND act F0.0 ->r1 (rank 0, step 1)}}
    pp.recv F stage 0 mb 1 from 0
    pp.recv F stage 0 mb 0 from 0
    pp.compute F stage 1 mb 0
    pp.compute F stage 1 mb 1
    pp.compute BW stage 1 mb 0
    pp.send BW stage 1 mb 0 to 0
    pp.compute BW stage 1 mb 1
    pp.send BW stage 1 mb 1 to 0
  }
}

// -----

// Over the memory limit: 1F1B on 2 ranks keeps 2 microbatches in flight on
// rank 0, i.e. 2 M_B, above a limit of 1.5.
pp.schedule "1f1b" ranks 2 stages 2 microbatches 2 placement [0, 1] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 1: activation memory 2.000000 exceeds the limit 1.500000}}
    pp.compute F stage 0 mb 1
    pp.compute BW stage 0 mb 0
    pp.compute BW stage 0 mb 1
  }
  pp.rank_program 1 {
    pp.compute F stage 1 mb 0
    pp.compute BW stage 1 mb 0
    pp.compute F stage 1 mb 1
    pp.compute BW stage 1 mb 1
  }
}

// -----

// ZeRO-3: a compute before its stage's UNSHARD.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{invalid schedule: rank 0, step 0: F0.0 (action 0) uses stage 0's parameters before its UNSHARD}}
    pp.compute F stage 0 mb 0
    pp.unshard stage 0
    pp.compute BW stage 0 mb 0
    pp.reshard stage 0
  }
}

// -----

// ZeRO-3: a compute after its stage's RESHARD.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    pp.unshard stage 0
    pp.compute F stage 0 mb 0
    pp.reshard stage 0
    // expected-error @+1 {{invalid schedule: rank 0, step 3: BW0.0 (action 3) uses stage 0's parameters after its RESHARD (action 2)}}
    pp.compute BW stage 0 mb 0
  }
}

// -----

// ZeRO-3: a stage gathered twice.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    pp.unshard stage 0
    pp.compute F stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 2: UNSHARD of stage 0 duplicated: the first is action 0}}
    pp.unshard stage 0
    pp.compute BW stage 0 mb 0
    pp.reshard stage 0
  }
}

// -----

// ZeRO-3: a gathered stage never released.
// expected-error @+1 {{invalid schedule: rank 0, step 3: no RESHARD of stage 0 after its last compute (action 2)}}
pp.schedule "1f1b" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    pp.unshard stage 0
    pp.compute F stage 0 mb 0
    pp.compute BW stage 0 mb 0
  }
}

// -----

// Activation offload: an OFFLOAD before its F.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    // expected-error @+1 {{invalid schedule: rank 0, step 0: OFFLOAD F0.0 before F0.0 made the stash (action 1)}}
    pp.offload F stage 0 mb 0
    pp.compute F stage 0 mb 0
    pp.compute F stage 0 mb 1
    pp.reload F stage 0 mb 0
    pp.compute BW stage 0 mb 0
    pp.compute BW stage 0 mb 1
  }
}

// -----

// Activation offload: a stash offloaded twice.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.offload F stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 2: OFFLOAD of the stash of F0.0 duplicated: the first is action 1}}
    pp.offload F stage 0 mb 0
    pp.compute F stage 0 mb 1
    pp.reload F stage 0 mb 0
    pp.compute BW stage 0 mb 0
    pp.compute BW stage 0 mb 1
  }
}

// -----

// Activation offload: an OFFLOAD after the B that reads the stash.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 1 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.compute BW stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 2: OFFLOAD F0.0 after the B/BW that reads the stash of F0.0 (action 1)}}
    pp.offload F stage 0 mb 0
  }
}

// -----

// Activation offload: a RELOAD before the stash's OFFLOAD.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 1: RELOAD F0.0 before any OFFLOAD of the stash of F0.0}}
    pp.reload F stage 0 mb 0
    pp.offload F stage 0 mb 0
    pp.compute F stage 0 mb 1
    pp.compute BW stage 0 mb 0
    pp.compute BW stage 0 mb 1
  }
}

// -----

// Activation offload: a stash reloaded twice.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.offload F stage 0 mb 0
    pp.reload F stage 0 mb 0
    // expected-error @+1 {{invalid schedule: rank 0, step 3: RELOAD of the stash of F0.0 duplicated: the first is action 2}}
    pp.reload F stage 0 mb 0
    pp.compute F stage 0 mb 1
    pp.compute BW stage 0 mb 0
    pp.compute BW stage 0 mb 1
  }
}

// -----

// Activation offload: the B reads the stash before its RELOAD.
pp.schedule "1f1b" ranks 1 stages 1 microbatches 2 placement [0] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.offload F stage 0 mb 0
    pp.compute F stage 0 mb 1
    // expected-error @+1 {{invalid schedule: rank 0, step 3: BW0.0 (action 3) reads the stash of F0.0 while it is offloaded (OFFLOAD at action 1, no RELOAD before this action)}}
    pp.compute BW stage 0 mb 0
    pp.reload F stage 0 mb 0
    pp.compute BW stage 0 mb 1
  }
}
