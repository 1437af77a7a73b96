// A 2-stage linear pipeline with empty stage bodies (schedule tests only
// need the placement).
pp.pipeline @m stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
}
