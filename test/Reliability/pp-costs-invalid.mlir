// Costs whose sums overflow, or that are negative, are verifier and
// simulator errors at the schedule (checkCosts, docs/reliability.md), not
// a correct schedule reported as wrong ("sends F0.2 before producing it")
// nor times of inf.
// RUN: pipeforge-opt %s --pp-verify-schedule="tf=1e308 tb=1e308" -verify-diagnostics -o /dev/null
// RUN: not pipeforge-opt %s --pp-verify-schedule="tf=-1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: error: invalid schedule: cost model: F time (tf) is -1; times and memory must be finite and >= 0
// RUN: not pipeforge-opt %s --pp-simulate="tw=1e29 tb=1e29" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SIM
// SIM: error: simulation failed: cost model: the times overflow: 8 actions of up to 4e+29 time units each (an overlapped pair with its all-to-alls, plus tcomm) add up to 3.2e+30, above 1e+30

// expected-error @+1 {{invalid schedule: cost model: the times overflow: one action (an overlapped pair with its all-to-alls, plus tcomm) takes more than the largest number; give smaller units}}
pp.schedule "1f1b" ranks 2 stages 2 microbatches 1 placement [0, 1] {
  pp.rank_program 0 {
    pp.compute F stage 0 mb 0
    pp.send F stage 0 mb 0 to 1
    pp.recv BW stage 1 mb 0 from 1
    pp.compute BW stage 0 mb 0
  }
  pp.rank_program 1 {
    pp.recv F stage 0 mb 0 from 0
    pp.compute F stage 1 mb 0
    pp.compute BW stage 1 mb 0
    pp.send BW stage 1 mb 0 to 0
  }
}
