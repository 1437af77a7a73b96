//===- MemoryCheck.cpp - The planned bytes against the host's memory ------===//
//
// The host's available memory (/proc/meminfo, the memory cgroup), the
// --max-memory cap, and the collective check at start: every rank's plan
// (ExecutorMemoryPlan.cpp) gathered on world rank 0, summed per pool (the
// ranks of one host, or of one device of a host on a device backend),
// compared with the pool's memory; rank 0 prints the pools that do not fit
// (each rank's classes, its largest consumers, the options that would
// fit), then every rank learns the verdict from one allreduce, so no rank
// goes on into a collective while another stops.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/MemoryCheck.h"

#include "pipeforge/Schedule/MemoryLimit.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace pipeforge::rt {

namespace {

std::string readText(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<int64_t> parseInt(const std::string &text) {
  size_t b = text.find_first_not_of(" \t\n");
  if (b == std::string::npos ||
      !std::isdigit(static_cast<unsigned char>(text[b])))
    return std::nullopt;
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text.c_str() + b, &end, 10);
  if (errno != 0)
    return std::nullopt;
  for (; *end; ++end)
    if (!std::isspace(static_cast<unsigned char>(*end)))
      return std::nullopt;
  return v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v);
}

/// "N B (X.YZ GiB)".
std::string bytesText(int64_t n) { return sched::formatBytes(double(n)); }

} // namespace

std::optional<int64_t> parseMemAvailable(const std::string &meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0)
      continue;
    std::istringstream f(line.substr(13));
    long long kb = -1;
    std::string unit;
    if (!(f >> kb) || kb < 0)
      return std::nullopt;
    f >> unit;
    return int64_t(kb) * (unit == "kB" ? 1024 : 1);
  }
  return std::nullopt;
}

std::optional<int64_t> parseCgroupLimit(const std::string &text) {
  auto v = parseInt(text);
  if (!v || *v >= (int64_t(1) << 62)) // "max", v1's page-rounded LONG_MAX
    return std::nullopt;
  return v;
}

std::optional<int64_t> parseStatField(const std::string &stat,
                                      const std::string &key) {
  std::istringstream in(stat);
  std::string k;
  long long v = 0;
  while (in >> k >> v)
    if (k == key)
      return int64_t(v);
  return std::nullopt;
}

CgroupPaths parseProcCgroup(const std::string &text) {
  CgroupPaths out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find(':'),
           b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos)
      continue;
    std::string ctrls = line.substr(a + 1, b - a - 1),
                path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && ctrls.empty())
      out.v2 = path;
    std::istringstream cs(ctrls);
    for (std::string c; std::getline(cs, c, ',');)
      if (c == "memory")
        out.v1 = path;
  }
  return out;
}

std::optional<int64_t> cgroupHeadroom(const std::string &limit,
                                      const std::string &usage,
                                      const std::string &stat, bool v2) {
  auto lim = parseCgroupLimit(limit);
  if (!lim)
    return std::nullopt;
  int64_t used = parseInt(usage).value_or(0);
  // The inactive file cache is reclaimed before the cgroup's OOM killer.
  used -= parseStatField(stat, v2 ? "inactive_file" : "total_inactive_file")
              .value_or(0);
  return std::max<int64_t>(0, *lim - std::max<int64_t>(used, 0));
}

namespace {

/// The lowest headroom of the cgroup folder `dir` and its parents up to
/// `root` (the mount point), with its source.
void lowerByCgroup(AvailableMemory &a, const std::string &root, std::string rel,
                   bool v2) {
  const char *limitFile = v2 ? "memory.max" : "memory.limit_in_bytes";
  const char *usageFile = v2 ? "memory.current" : "memory.usage_in_bytes";
  while (true) {
    std::string dir = root + rel;
    auto h = cgroupHeadroom(readText(dir + "/" + limitFile),
                            readText(dir + "/" + usageFile),
                            readText(dir + "/memory.stat"), v2);
    if (h && (a.bytes < 0 || *h < a.bytes)) {
      a.bytes = *h;
      a.source = std::string(v2 ? "cgroup v2 " : "cgroup v1 ") + limitFile +
                 " less usage";
    }
    size_t slash = rel.find_last_of('/');
    if (rel.empty() || rel == "/" || slash == std::string::npos)
      return;
    rel = rel.substr(0, slash);
  }
}

} // namespace

AvailableMemory hostAvailableMemory() {
  AvailableMemory a;
  if (auto m = parseMemAvailable(readText("/proc/meminfo"))) {
    a.bytes = *m;
    a.source = "MemAvailable";
  }
  CgroupPaths cg = parseProcCgroup(readText("/proc/self/cgroup"));
  if (!cg.v2.empty())
    lowerByCgroup(a, "/sys/fs/cgroup", cg.v2 == "/" ? "" : cg.v2, true);
  if (!cg.v1.empty())
    lowerByCgroup(a, "/sys/fs/cgroup/memory", cg.v1 == "/" ? "" : cg.v1, false);
  return a;
}

std::optional<MemoryCap> parseMemoryCap(const std::string &text,
                                        std::string &why) {
  MemoryCap c;
  if (text == "auto")
    return c;
  if (text == "off") {
    c.off = true;
    return c;
  }
  auto l = sched::parseMemoryLimit(text);
  if (!l || !l->isBytes() || !(l->value >= 1) || l->value > 9e18) {
    why = "--max-memory must be auto, off or a size in bytes with a suffix "
          "(B, KB, MB, GB, KiB, MiB, GiB: 512MiB, 2GB, 1e9B; got '" +
          text + "')";
    return std::nullopt;
  }
  c.bytes = int64_t(l->value);
  return c;
}

std::string encodeRankMemory(const RankMemory &r) {
  std::ostringstream o;
  const MemoryPlan &p = r.plan;
  o << r.rank << '\t' << r.pool << '\t' << r.device << '\t' << r.zero << '\t'
    << r.dp << '\t' << r.copies << '\t' << r.available.bytes << '\t'
    << r.available.source << '\t' << p.params << '\t' << p.grads << '\t'
    << p.optimizer << '\t' << p.buffersPeak << '\t' << p.stash << '\t'
    << p.messages << '\t' << p.workspace << '\t' << p.data;
  for (auto *list : {&p.largestParams, &p.largestStages}) {
    o << '\t' << list->size();
    for (auto &[name, n] : *list)
      o << '\t' << name << '\t' << n;
  }
  return o.str();
}

std::optional<RankMemory> decodeRankMemory(const std::string &s) {
  std::vector<std::string> f;
  std::istringstream in(s);
  for (std::string x; std::getline(in, x, '\t');)
    f.push_back(x);
  if (f.size() < 18)
    return std::nullopt;
  auto num = [&](size_t i) -> int64_t {
    return i < f.size() ? std::strtoll(f[i].c_str(), nullptr, 10) : 0;
  };
  RankMemory r;
  MemoryPlan &p = r.plan;
  r.rank = int(num(0));
  r.pool = f[1];
  r.device = num(2) != 0;
  r.zero = int(num(3));
  r.dp = int(num(4));
  r.copies = int(num(5));
  r.available.bytes = num(6);
  r.available.source = f[7];
  int64_t *fields[] = {&p.params, &p.grads,    &p.optimizer, &p.buffersPeak,
                       &p.stash,  &p.messages, &p.workspace, &p.data};
  for (size_t k = 0; k < 8; ++k)
    *fields[k] = num(8 + k);
  size_t i = 16;
  for (auto *list : {&p.largestParams, &p.largestStages}) {
    int64_t n = num(i++);
    for (int64_t k = 0; k < n && i + 1 < f.size(); ++k, i += 2)
      list->push_back({f[i], num(i + 1)});
  }
  return r;
}

namespace {

/// A pool's ranks and sums.
struct Pool {
  std::string name;
  std::vector<const RankMemory *> ranks;
  int64_t planned = 0, available = -1;
  std::string source;
  bool fits() const { return available < 0 || planned <= available; }
};

std::vector<Pool> poolsOf(const std::vector<RankMemory> &ranks) {
  std::vector<Pool> pools;
  for (const RankMemory &r : ranks) {
    auto it = std::find_if(pools.begin(), pools.end(),
                           [&](const Pool &p) { return p.name == r.pool; });
    if (it == pools.end()) {
      pools.push_back({r.pool, {}, 0, -1, ""});
      it = pools.end() - 1;
    }
    it->ranks.push_back(&r);
    it->planned += r.plan.total();
    // The lowest any of them read (they read before anyone allocates).
    if (r.available.bytes >= 0 &&
        (it->available < 0 || r.available.bytes < it->available)) {
      it->available = r.available.bytes;
      it->source = r.available.source;
    }
  }
  return pools;
}

std::string rankList(const Pool &p) {
  std::string s;
  for (const RankMemory *r : p.ranks)
    s += (s.empty() ? "" : ", ") + std::to_string(r->rank);
  return (p.ranks.size() == 1 ? "rank " : "ranks ") + s;
}

/// A rank's classes (--memory-report's) and its largest consumers.
std::string rankLines(const RankMemory &r) {
  const MemoryPlan &p = r.plan;
  std::string rk = "memory check: rank " + std::to_string(r.rank);
  std::string out =
      rk + " plans " + bytesText(p.total()) + ": parameters " +
      std::to_string(p.params) + ", gradients " + std::to_string(p.grads) +
      ", optimizer state " + std::to_string(p.optimizer) +
      ", activation stash " + std::to_string(p.stash) + ", workspace " +
      std::to_string(p.workspace) + ", messages " + std::to_string(p.messages) +
      ", tokens " + std::to_string(p.data) + "\n";
  std::string big;
  for (auto &[name, n] : p.largestParams)
    big += (big.empty() ? "" : ", ") + ("parameter '" + name + "' ") +
           bytesText(n);
  for (auto &[name, n] : p.largestStages)
    big += (big.empty() ? "" : ", ") + name + " " + bytesText(n) +
           " (its functions' workspace and one microbatch's stash)";
  if (!big.empty())
    out += rk + " largest: " + big + "\n";
  return out;
}

/// The options that would lower a pool's plan, largest effect first where
/// it can be computed.
std::string suggestions(const Pool &pool) {
  int64_t state = 0, opt = 0, act = 0, stash = 0, optShared = 0;
  int zero = 0, shards = 1;
  for (const RankMemory *r : pool.ranks) {
    const MemoryPlan &p = r->plan;
    state += p.params + p.grads + p.optimizer;
    opt += p.optimizer;
    act += p.stash + p.workspace;
    stash += p.stash;
    zero = std::max(zero, r->zero);
    shards = std::max(shards, std::max(1, r->dp) * std::max(1, r->copies));
  }
  const int64_t over = pool.planned - pool.available;
  optShared = opt - opt / shards;
  std::string t = "memory check: to fit in " + pool.name + " (" +
                  bytesText(over) + " over):\n";
  auto item = [&](const std::string &s) { t += "  - " + s + "\n"; };
  if (zero == 0 && opt > 0 && shards > 1)
    item("--zero 1 shards the optimizer state over the " +
         std::to_string(shards) + " ranks that hold the same stages: about " +
         bytesText(optShared) + " less" +
         (optShared >= over ? " (enough)" : " (not enough alone)") +
         "; --zero 2 and 3 do not lower this runtime's step peak");
  else if (zero == 0 && opt > 0)
    item("data parallelism (pipeforge-compile --dp) with --zero 1 shards the "
         "optimizer state (" +
         bytesText(opt) + " here)");
  item("recomputation at compile time (pipeforge-compile --recompute) "
       "stashes only each stage's inputs (activation stash here " +
       bytesText(stash) + ")");
  item("a smaller microbatch (pipeforge-compile --microbatch-size, "
       "--seq-len) shrinks the stash and the workspace (" +
       bytesText(act) + " here)");
  item("more pipeline ranks or stages (pipeforge-compile --ranks) or tensor "
       "parallelism (--tp) split the parameters, gradients and optimizer "
       "state (" +
       bytesText(state) + " here)");
  if (pool.ranks.size() > 1)
    item("fewer ranks per host (or device): " + rankList(pool) +
         " share this memory");
  item("--max-memory off skips this check");
  return t;
}

} // namespace

std::string memoryCheckReport(const std::vector<RankMemory> &ranks,
                              bool printAll, bool &fits) {
  std::vector<Pool> pools = poolsOf(ranks);
  fits = std::all_of(pools.begin(), pools.end(),
                     [](const Pool &p) { return p.fits(); });
  std::string out;
  for (const Pool &p : pools) {
    if (p.fits() && !printAll)
      continue;
    out += "memory check: " + p.name + ": " + rankList(p) +
           (p.ranks.size() == 1 ? " plans " : " plan ") + bytesText(p.planned);
    if (p.available < 0)
      out += " (not checked)\n";
    else
      out += std::string(p.fits() ? ", within the " : ", more than the ") +
             bytesText(p.available) + " available (" + p.source + ")\n";
    for (const RankMemory *r : p.ranks)
      out += rankLines(*r);
    if (!p.fits())
      out += suggestions(p);
  }
  return out;
}

Status checkPlannedMemory(const Program &prog, Backend &be, Transport &tr,
                          const ExecutorOptions &eo,
                          const MemoryCheckOptions &mo,
                          const std::string &host) {
  if (mo.cap.off && !mo.print)
    return Status::ok();
  auto plan = planRankMemory(prog, be, tr, eo, mo.plan);
  if (!plan)
    return plan.status();
  RankMemory me;
  me.rank = tr.worldRank();
  me.plan = *plan;
  me.zero = eo.zeroStage;
  me.dp = tr.dpSize();
  me.copies = prog.schedule.placement.numCopies;
  int64_t devFree = be.hostVisible() ? -1 : be.freeMemory();
  me.device = devFree >= 0;
  me.pool = me.device ? host + " device " + std::to_string(be.device()) : host;
  if (me.device)
    me.available = {devFree, "free device memory"};
  else
    me.available = hostAvailableMemory();
  if (mo.cap.bytes >= 0 &&
      (me.available.bytes < 0 || mo.cap.bytes < me.available.bytes))
    me.available = {mo.cap.bytes, "--max-memory"};
  if (mo.cap.off)
    me.available = {-1, "--max-memory off"};
  auto all = tr.gatherStrings(encodeRankMemory(me));
  if (!all)
    return all.status();
  float stop = 0;
  if (tr.worldRank() == 0) {
    std::vector<RankMemory> ranks;
    for (const std::string &s : *all)
      if (auto r = decodeRankMemory(s))
        ranks.push_back(*r);
    bool fits = true;
    std::string report = memoryCheckReport(ranks, mo.print, fits);
    std::FILE *to = fits ? stdout : stderr;
    std::fputs(report.c_str(), to);
    std::fflush(to);
    stop = fits ? 0.0f : 1.0f;
  }
  // The verdict reaches every rank before any leaves (no rank stops while
  // another enters a collective).
  if (Status s = tr.allreduce(&stop, 1, Group::World, ReduceOp::Max); !s)
    return s;
  if (stop > 0)
    return Status::error(
        "stopped before allocating: the planned memory does not fit "
        "(memory check above; --max-memory off skips it)");
  return Status::ok();
}

} // namespace pipeforge::rt
