//===- MemoryLimit.cpp - Parsing per-rank activation limits ---------------===//

#include "pipeforge/Schedule/MemoryLimit.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pipeforge::sched {

namespace {

const char *kForms = "a number of M_B (e.g. 3.5), <k>p for k x ranks M_B "
                     "(e.g. 2p), or bytes with a suffix B, KB, MB, GB, KiB, "
                     "MiB or GiB (e.g. 12GB, 512MiB, 1e9B)";

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos)
    return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

/// The multiplier of a byte suffix, or 0 when `suffix` is none of them.
double byteMultiplier(const std::string &suffix) {
  struct Unit {
    const char *name;
    double mult;
  };
  static const Unit units[] = {
      {"B", 1},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
  };
  for (const Unit &u : units)
    if (suffix == u.name)
      return u.mult;
  return 0;
}

} // namespace

Expected<MemoryLimit> parseMemoryLimit(const std::string &text) {
  std::string s = trim(text);
  auto bad = [&](const std::string &why) -> Expected<MemoryLimit> {
    return Status::error("memory limit '" + text + "' " + why +
                         "; expected " + kForms);
  };
  if (s.empty())
    return bad("is empty");
  const char *begin = s.c_str();
  char *end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin)
    return bad("does not start with a number");
  // strtod accepts "inf", "nan" and hex floats; none of them is a limit.
  if (!std::isfinite(v))
    return bad("is not finite");
  if (v < 0)
    return bad("is negative");
  std::string suffix = trim(std::string(end));
  MemoryLimit lim;
  lim.value = v;
  if (suffix.empty()) {
    lim.unit = MemoryLimit::Unit::MB;
    return lim;
  }
  if (suffix == "p") {
    lim.unit = MemoryLimit::Unit::PerRank;
    return lim;
  }
  if (double mult = byteMultiplier(suffix); mult > 0) {
    lim.unit = MemoryLimit::Unit::Bytes;
    lim.value = v * mult;
    return lim;
  }
  return bad("has an unknown unit '" + suffix + "'");
}

Expected<double> resolveMemoryLimit(const MemoryLimit &limit, int ranks,
                                    double bytesPerMB,
                                    const std::string &whyNoBytes) {
  switch (limit.unit) {
  case MemoryLimit::Unit::MB:
    return limit.value;
  case MemoryLimit::Unit::PerRank:
    return limit.value * ranks;
  case MemoryLimit::Unit::Bytes:
    if (!(bytesPerMB > 0)) {
      std::string msg = "memory limit " + formatBytes(limit.value) +
                        " is in bytes, but the size of M_B in bytes is "
                        "unknown";
      if (!whyNoBytes.empty())
        msg += ": " + whyNoBytes;
      return Status::error(msg);
    }
    return limit.value / bytesPerMB;
  }
  return limit.value;
}

std::string formatBytes(double bytes) {
  static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  double v = bytes;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  char buf[64];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.0f B (%.2f %s)", bytes, v, names[i]);
  return buf;
}

} // namespace pipeforge::sched
