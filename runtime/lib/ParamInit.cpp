//===- ParamInit.cpp - Deterministic parameter initialisation -------------===//
//
// "normal:<std>", "zeros", "ones", "uniform:<a>", seeded with (seed, the
// parameter's name without "@copyN"), so DualPipe's two copies and every
// rank layout start from the same numbers.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Executor.h"

#include "pipeforge/Support/Hash.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace pipeforge::rt {

namespace {
uint64_t splitmix(uint64_t &x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t hashStr(const std::string &s, uint64_t h) {
  return fnv1a64(s.data(), s.size(), h);
}

} // namespace

std::string baseParamName(const std::string &name) {
  size_t at = name.rfind("@copy");
  if (at == std::string::npos)
    return name;
  for (size_t i = at + 5; i < name.size(); ++i)
    if (!isdigit((unsigned char)name[i]))
      return name;
  return name.substr(0, at);
}

Status initParamValues(const Param &p, uint64_t seed, float *out) {
  int64_t n = p.type.numElements();
  const std::string &init = p.init;
  uint64_t base = hashStr(baseParamName(p.name), kFnv1aOffset ^ seed);
  auto uniform01 = [&](int64_t i, int k) {
    uint64_t x = base + uint64_t(i) * 2 + uint64_t(k);
    return (double(splitmix(x) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  };
  if (init == "zeros" || init.empty()) {
    std::fill(out, out + n, 0.0f);
  } else if (init == "ones") {
    std::fill(out, out + n, 1.0f);
  } else if (init.rfind("normal:", 0) == 0 || init.rfind("uniform:", 0) == 0) {
    bool normal = init[0] == 'n';
    char *end = nullptr;
    const char *num = init.c_str() + (normal ? 7 : 8);
    double a = std::strtod(num, &end);
    if (end == num || *end)
      return Status::error("parameter '" + p.name + "': bad init '" + init +
                           "'");
    for (int64_t i = 0; i < n; ++i) {
      double u1 = uniform01(i, 0), u2 = uniform01(i, 1);
      out[i] = normal ? float(a * std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(6.283185307179586 * u2))
                      : float(a * (2 * u1 - 1));
    }
  } else {
    return Status::error("parameter '" + p.name + "': unknown init '" + init +
                         "' (expected normal:<std>, uniform:<a>, zeros, ones)");
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Weights files: "PFWEIGHTS1\n" then per tensor "<name> <n>\n" + n floats.
//===----------------------------------------------------------------------===//

} // namespace pipeforge::rt
