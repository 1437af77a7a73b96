// Without a pp.pipeline, --pp-schedule builds a schedule from the options
// alone (handy for studying schedules).
// RUN: pipeforge-opt %s --pp-schedule="kind=zbv ranks=2 microbatches=2" | FileCheck %s --check-prefix=ZBV
// RUN: pipeforge-opt %s --pp-schedule="kind=dualpipe ranks=2 microbatches=4" | FileCheck %s --check-prefix=DUAL
// RUN: pipeforge-opt %s --pp-schedule="kind=interleaved ranks=2 microbatches=2 chunks=2" | FileCheck %s --check-prefix=INTER

// ZBV: pp.schedule "zbv" ranks 2 stages 4 microbatches 2 placement [0, 1, 1, 0] {
// ZBV-NEXT: pp.rank_program 0 {
// ZBV-NEXT: pp.compute F stage 0 mb 0

// DualPipe: two model copies (placement lists 2 x 2 ranks), C/2 = 2
// microbatches per copy, overlapped F&B pairs in the steady state.
// DUAL: pp.schedule "dualpipe" ranks 2 stages 2 microbatches 2 placement [0, 1, 1, 0] {
// DUAL: pp.overlap {
// DUAL-NEXT: pp.compute F stage 1 mb 1 copy 1
// DUAL-NEXT: pp.compute BW stage 0 mb 0
// DUAL-NEXT: }

// INTER: pp.schedule "interleaved" ranks 2 stages 4 microbatches 2 placement [0, 1, 0, 1] {
module {}
