//===- ScheduleBench.cpp - Generator + comm insertion timings -------------===//
//
// Times the whole schedule-library pipeline for DualPipeV on 64 ranks:
// generate, insertComm, verify and simulate, at 256, 1024 and 4096
// microbatches, plus each step alone.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Schedule/Verify.h"

#include <benchmark/benchmark.h>

using namespace pipeforge::sched;

namespace {

GenOptions dualPipeV64(int64_t microbatches) {
  GenOptions o;
  o.ranks = 64;
  o.microbatches = static_cast<int32_t>(microbatches);
  return o;
}

void BM_DualPipeVGenerate(benchmark::State &state) {
  GenOptions o = dualPipeV64(state.range(0));
  for (auto _ : state) {
    Expected<Schedule> s = generate(ScheduleKind::DualPipeV, o);
    if (!s)
      state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(s);
  }
}

void BM_DualPipeVInsertComm(benchmark::State &state) {
  Expected<Schedule> base =
      generate(ScheduleKind::DualPipeV, dualPipeV64(state.range(0)));
  for (auto _ : state) {
    state.PauseTiming();
    Schedule s = *base;
    state.ResumeTiming();
    Status st = insertComm(s);
    if (!st)
      state.SkipWithError(st.message().c_str());
    benchmark::DoNotOptimize(s);
  }
}

void BM_DualPipeVAll(benchmark::State &state) {
  GenOptions o = dualPipeV64(state.range(0));
  CostModel cost;
  for (auto _ : state) {
    Expected<Schedule> s = generate(ScheduleKind::DualPipeV, o);
    Status st = s ? insertComm(*s) : s.status();
    if (st)
      st = verify(*s);
    if (!st) {
      state.SkipWithError(st.message().c_str());
      break;
    }
    Expected<SimResult> r = simulate(*s, cost);
    if (!r)
      state.SkipWithError(r.message().c_str());
    benchmark::DoNotOptimize(r);
  }
}

} // namespace

BENCHMARK(BM_DualPipeVGenerate)->Arg(256)->Arg(1024)->Arg(4096)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DualPipeVInsertComm)->Arg(256)->Arg(1024)->Arg(4096)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DualPipeVAll)->Arg(256)->Arg(1024)->Arg(4096)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
