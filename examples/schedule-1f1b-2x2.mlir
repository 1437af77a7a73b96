// 1F1B on 2 ranks with 2 microbatches, messages inserted: exactly what the
// passes produce (test/Examples/examples.test checks it, and that it
// verifies). Each rank runs its program top to bottom. Regenerate with:
//
//   (sed -n '/^\/\//p' examples/schedule-1f1b-2x2.mlir; \
//    echo | pipeforge-opt --pp-schedule="kind=1f1b ranks=2 microbatches=2" \
//        --pp-insert-comm) > new.mlir && mv new.mlir examples/schedule-1f1b-2x2.mlir
//
// Check with: pipeforge-opt examples/schedule-1f1b-2x2.mlir --pp-verify-schedule
module {
  pp.schedule "1f1b" ranks 2 stages 2 microbatches 2 placement [0, 1] {
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
      pp.recv F stage 0 mb 0 from 0
      pp.compute F stage 1 mb 0
      pp.recv F stage 0 mb 1 from 0
      pp.compute BW stage 1 mb 0
      pp.send BW stage 1 mb 0 to 0
      pp.compute F stage 1 mb 1
      pp.compute BW stage 1 mb 1
      pp.send BW stage 1 mb 1 to 0
    }
  }
}

