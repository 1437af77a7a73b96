// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{'pp.pipeline' op expects at least one stage, got 0}}
pp.pipeline @p stages 0 ranks 1 placement linear {}

// -----

// expected-error @+1 {{'pp.pipeline' op expects at least one rank, got 0}}
pp.pipeline @p stages 1 ranks 0 placement linear {}

// -----

// expected-error @+1 {{'pp.pipeline' op placement 'linear' needs stages == ranks, got 3 stages on 2 ranks}}
pp.pipeline @p stages 3 ranks 2 placement linear {}

// -----

// expected-error @+1 {{'pp.pipeline' op placement 'interleaved' needs stages to be a multiple of ranks, got 5 stages on 2 ranks}}
pp.pipeline @p stages 5 ranks 2 placement interleaved {}

// -----

// expected-error @+1 {{'pp.pipeline' op placement 'v' needs stages == 2 x ranks, got 3 stages on 2 ranks}}
pp.pipeline @p stages 3 ranks 2 placement v {}

// -----

// expected-error @+1 {{'pp.pipeline' op placement 'dual' needs an even number of ranks, got 3}}
pp.pipeline @p stages 3 ranks 3 placement dual {}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{'arith.constant' op is not allowed directly inside 'pp.pipeline' (only 'pp.stage')}}
  %c = arith.constant 0 : i32
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{'pp.stage' op copy 1 out of range: the pipeline has 1 model copy}}
  pp.stage 0 copy 1 rank 0 chunk 0 {}
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{'pp.stage' op index 1 out of range [0, 1)}}
  pp.stage 1 rank 0 chunk 0 {}
}

// -----

pp.pipeline @p stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  // expected-error @+1 {{'pp.stage' op duplicates stage 0}}
  pp.stage 0 rank 0 chunk 0 {}
}

// -----

pp.pipeline @p stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  // expected-error @+1 {{'pp.stage' op is on rank 0 but placement 'linear' puts stage 1 on rank 1}}
  pp.stage 1 rank 0 chunk 0 {}
}

// -----

pp.pipeline @p stages 4 ranks 2 placement v {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
  // expected-error @+1 {{'pp.stage' op is chunk 0 of its rank but placement 'v' makes it chunk 1}}
  pp.stage 2 rank 1 chunk 0 {}
  pp.stage 3 rank 0 chunk 1 {}
}

// -----

// expected-error @+1 {{'pp.pipeline' op has 1 stages, expected 2}}
pp.pipeline @p stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{'pp.stage' op attribute 'index' failed to satisfy constraint: 32-bit signless integer attribute whose value is non-negative}}
  pp.stage -1 rank 0 chunk 0 {}
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{'pp.stage' op rank 4 out of range [0, 1)}}
  pp.stage 0 rank 4 chunk 0 {}
}

// -----

// expected-error @+1 {{'pp.stage' op expects parent op 'pp.pipeline'}}
pp.stage 0 rank 0 chunk 0 {}

// -----

// expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'placement' [linear, interleaved, v, dual]}}
pp.pipeline @p stages 1 ranks 1 placement diagonal {}
