//===- ExecutorTrace.cpp - The merged Chrome trace of a run ---------------===//

#include "ExecutorImpl.h"

#include <cstdio>

namespace pipeforge::rt {

Status Executor::writeTrace(const std::string &path) {
  std::string js;
  int wr = impl->tr.worldRank();
  char buf[640];
  // The rank's epoch on its host's steady clock: the exit of a world
  // barrier common to all ranks (alignClocks), so `ts` of different ranks
  // and hosts line up to within sync_us.
  std::snprintf(buf, sizeof buf,
                "{\"name\":\"clock\",\"ph\":\"M\",\"pid\":%d,"
                "\"args\":{\"epoch_us\":%.3f,\"sync_us\":%.3f}},\n",
                wr, impl->epoch * 1e6, impl->clockSync * 1e6);
  js += buf;
  for (const TraceEvent &e : impl->events) {
    const char *cats[3] = {"compute", "comm", "step"};
    if (e.counter >= 0) { // the stash level (Perfetto draws a track)
      std::snprintf(buf, sizeof buf,
                    "{\"name\":\"%s\",\"cat\":\"memory\",\"ph\":\"C\","
                    "\"pid\":%d,\"ts\":%.3f,\"args\":{\"bytes\":%lld}},\n",
                    e.name.c_str(), wr, e.ts * 1e6, (long long)e.counter);
      js += buf;
      continue;
    }
    std::snprintf(buf, sizeof buf,
                  "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,"
                  "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f%s%s%s},\n",
                  e.name.c_str(), e.cat ? e.cat : cats[e.tid < 3 ? e.tid : 1],
                  wr, e.tid, e.ts * 1e6, e.dur * 1e6,
                  e.args.empty() ? "" : ",\"args\":{", e.args.c_str(),
                  e.args.empty() ? "" : "}");
    js += buf;
  }
  auto all = impl->tr.gatherStrings(js);
  if (!all)
    return all.status();
  if (wr != 0)
    return Status::ok();
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f)
    return Status::error("cannot write trace '" + path + "'");
  std::fputs("{\"traceEvents\":[\n", f);
  for (size_t r = 0; r < all->size(); ++r) {
    std::fprintf(f,
                 "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%zu,"
                 "\"args\":{\"name\":\"rank %zu\"}},\n"
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":0,"
                 "\"args\":{\"name\":\"compute\"}},\n"
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":1,"
                 "\"args\":{\"name\":\"comm\"}},\n",
                 r, r, r, r);
    std::fputs((*all)[r].c_str(), f);
  }
  std::fputs(
      "{\"name\":\"end\",\"ph\":\"i\",\"pid\":0,\"ts\":0,\"s\":\"g\"}\n]}\n",
      f);
  return std::fclose(f) == 0 ? Status::ok()
                             : Status::error("error writing '" + path + "'");
}

} // namespace pipeforge::rt
