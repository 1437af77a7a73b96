//===- ExecutorWeights.cpp - Weights files, gather, replica check --------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/Data.h"
#include "pipeforge/Support/InputFile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

namespace pipeforge::rt {

Status writeWeights(const std::string &path, const NamedTensors &w) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return Status::error("cannot write '" + path + "'");
  std::fputs("PFWEIGHTS1\n", f);
  for (auto &[name, v] : w) {
    std::fprintf(f, "%s %zu\n", name.c_str(), v.size());
    std::fwrite(v.data(), 4, v.size(), f);
  }
  bool ok = std::fclose(f) == 0;
  return ok ? Status::ok() : Status::error("error writing '" + path + "'");
}

Expected<NamedTensors> readWeights(const std::string &path) {
  // A regular file only (Support/InputFile.h): a directory, a FIFO (which
  // blocked --compare-weights) or a device is refused before it is opened.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::error("cannot open weights file '" + path + "'");
  if (std::string p = inputFileProblem(path, /*allowStdin=*/false);
      !p.empty())
    return Status::error("weights file: " + p);
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return Status::error("cannot open weights file '" + path + "'");
  // A tensor's length is checked against what the file still holds
  // before anything is allocated for it.
  const uint64_t fileBytes = uint64_t(st.st_size);
  char line[4096];
  NamedTensors out;
  if (!std::fgets(line, sizeof line, f) ||
      std::string(line) != "PFWEIGHTS1\n") {
    std::fclose(f);
    return Status::error("'" + path + "' is not a weights file");
  }
  while (std::fgets(line, sizeof line, f)) {
    char name[4000];
    size_t n = 0;
    if (std::sscanf(line, "%3999s %zu", name, &n) != 2 || n > (1ull << 34)) {
      std::fclose(f);
      return Status::error("'" + path + "': bad tensor header");
    }
    long at = std::ftell(f);
    if (at < 0 || uint64_t(at) > fileBytes ||
        n > (fileBytes - uint64_t(at)) / 4) {
      std::fclose(f);
      return Status::error("'" + path + "': truncated tensor '" +
                           std::string(name) + "' (" + std::to_string(n) +
                           " floats announced)");
    }
    std::vector<float> v(n);
    if (std::fread(v.data(), 4, n, f) != n) {
      std::fclose(f);
      return Status::error("'" + path + "': truncated tensor '" +
                           std::string(name) + "'");
    }
    out.emplace_back(name, std::move(v));
  }
  std::fclose(f);
  return out;
}

bool compareWeights(const NamedTensors &a, const NamedTensors &b, double rtol,
                    double atol, std::string &report, bool &bitwise) {
  std::map<std::string, const std::vector<float> *> bm;
  for (auto &[n, v] : b)
    bm[n] = &v;
  bool ok = a.size() == b.size();
  bitwise = ok;
  double maxAbs = 0, maxRel = 0;
  std::string worst, problems;
  for (auto &[n, v] : a) {
    auto it = bm.find(n);
    if (it == bm.end() || it->second->size() != v.size()) {
      problems += " missing-or-resized:" + n;
      ok = bitwise = false;
      continue;
    }
    const std::vector<float> &w = *it->second;
    if (std::memcmp(v.data(), w.data(), v.size() * 4) != 0)
      bitwise = false;
    for (size_t i = 0; i < v.size(); ++i) {
      double d = std::fabs(double(v[i]) - double(w[i]));
      double r = d / std::max(1e-30, std::fabs(double(w[i])));
      if (!(d <= atol + rtol * std::fabs(double(w[i]))))
        ok = false;
      if (d > maxAbs || std::isnan(d)) {
        maxAbs = d;
        worst = n + "[" + std::to_string(i) + "]";
      }
      maxRel = std::max(maxRel, d > 0 ? r : 0.0);
    }
  }
  if (a.size() != b.size())
    problems += " tensor-count " + std::to_string(a.size()) + " vs " +
                std::to_string(b.size());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%zu tensors: %s; max abs diff %.3g (%s), max rel diff %.3g%s",
                a.size(), bitwise ? "bitwise equal" : "not bitwise equal",
                maxAbs, worst.empty() ? "-" : worst.c_str(), maxRel,
                problems.c_str());
  report = buf;
  return ok;
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

/// Serialises (name, floats) pairs as text-free bytes for gathering.
static std::string packTensors(const NamedTensors &t) {
  std::string s;
  for (auto &[n, v] : t) {
    uint64_t ln = n.size(), lv = v.size();
    s.append(reinterpret_cast<const char *>(&ln), 8);
    s += n;
    s.append(reinterpret_cast<const char *>(&lv), 8);
    s.append(reinterpret_cast<const char *>(v.data()), v.size() * 4);
  }
  return s;
}
static NamedTensors unpackTensors(const std::string &s) {
  NamedTensors t;
  size_t p = 0;
  while (p + 8 <= s.size()) {
    uint64_t ln, lv;
    std::memcpy(&ln, s.data() + p, 8);
    p += 8;
    std::string n = s.substr(p, ln);
    p += ln;
    std::memcpy(&lv, s.data() + p, 8);
    p += 8;
    std::vector<float> v(lv);
    std::memcpy(v.data(), s.data() + p, lv * 4);
    p += lv * 4;
    t.emplace_back(std::move(n), std::move(v));
  }
  return t;
}

/// Data-parallel and expert-parallel replicas of a parameter (or of an
/// expert slice) must hold the same bits after every step: each world rank
/// sends a hash per held tensor, world rank 0 compares them (collective).
Status Executor::Impl::checkReplicas(
    const std::function<std::string(int)> *fileOf) {
  std::string mine;
  for (auto &[i, ps] : params) {
    int32_t slice = expertParams.count(i)               ? epi
                    : prog.params[size_t(i)].tpDim >= 0 ? tpi
                                                        : -1;
    uint64_t h = fnv1a64(hostValue(ps), size_t(localElems(i)) * sizeof(float));
    mine.append(reinterpret_cast<const char *>(&i), 4);
    mine.append(reinterpret_cast<const char *>(&slice), 4);
    mine.append(reinterpret_cast<const char *>(&h), 8);
  }
  auto all = tr.gatherStrings(mine);
  if (!all)
    return all.status();
  std::map<std::pair<int32_t, int32_t>, std::pair<uint64_t, size_t>> first;
  // World rank 0 finds the first mismatch and tells every rank, so each
  // reports the same message: {found, param, slice + 1, rank a, rank b}
  // (small integers, exact in float) under a max-allreduce.
  float found[5] = {0, 0, 0, 0, 0};
  for (size_t r = 0; r < all->size() && found[0] == 0; ++r)
    for (size_t o = 0; o + 16 <= (*all)[r].size(); o += 16) {
      int32_t i, slice;
      uint64_t h;
      std::memcpy(&i, (*all)[r].data() + o, 4);
      std::memcpy(&slice, (*all)[r].data() + o + 4, 4);
      std::memcpy(&h, (*all)[r].data() + o + 8, 8);
      auto [it, fresh] =
          first.emplace(std::make_pair(i, slice), std::make_pair(h, r));
      if (!fresh && it->second.first != h) {
        found[0] = 1;
        found[1] = float(i);
        found[2] = float(slice + 1);
        found[3] = float(it->second.second);
        found[4] = float(r);
        break;
      }
    }
  if (Status s = tr.allreduce(found, 5, Group::World, ReduceOp::Max); !s)
    return s;
  if (found[0] != 0) {
    int slice = int(found[2]) - 1;
    std::string what =
        "parameter '" + prog.params[size_t(found[1])].name + "'" +
        (slice >= 0 ? " (slice " + std::to_string(slice) + ")" : "");
    int a = int(found[3]), b = int(found[4]);
    if (fileOf)
      return Status::error(
          what + " differs between world rank " + std::to_string(a) + " ('" +
          (*fileOf)(a) + "') and world rank " + std::to_string(b) + " ('" +
          (*fileOf)(b) +
          "'): the ranks hold replicas of it (data-, expert- or "
          "tensor-parallel), which must be equal");
    return Status::error("replicas diverged: " + what +
                         " differs between world ranks " + std::to_string(a) +
                         " and " + std::to_string(b));
  }
  return Status::ok();
}

Expected<NamedTensors> Executor::gatherWeights() {
  NamedTensors mine;
  // Expert params: every EP rank sends its slice; the gather arrives in
  // world rank order, i.e. in EP index order for a pipeline rank, so
  // concatenating same-named slices rebuilds the full tensor.
  if (impl->tr.dpIndex() == 0)
    for (auto &[i, ps] : impl->params) {
      const Param &p = impl->prog.params[size_t(i)];
      bool expert = impl->expertParams.count(i) > 0;
      if (p.copy != 0 || (!expert && impl->epi != 0) ||
          (p.tpDim < 0 && impl->tpi != 0))
        continue;
      int64_t n = impl->localElems(i);
      std::vector<float> v(static_cast<size_t>(n));
      std::memcpy(v.data(), impl->hostValue(ps), size_t(n) * 4);
      mine.emplace_back(p.name, std::move(v));
    }
  if (Status s = impl->checkReplicas(); !s)
    return s;
  if (Status s = impl->checkMoEBiasReplicas(); !s)
    return s;
  auto all = impl->tr.gatherStrings(packTensors(mine));
  if (!all)
    return all.status();
  NamedTensors out;
  std::map<std::string, size_t> at;
  for (const std::string &s : *all)
    for (auto &t : unpackTensors(s)) {
      auto [it, fresh] = at.emplace(t.first, out.size());
      if (fresh)
        out.push_back(std::move(t));
      else
        out[it->second].second.insert(out[it->second].second.end(),
                                      t.second.begin(), t.second.end());
    }
  // Program order.
  std::map<std::string, size_t> pos;
  for (size_t i = 0; i < impl->prog.params.size(); ++i)
    pos.emplace(impl->prog.params[i].name, i);
  // Tensor-parallel shards arrive in TP index order (consecutive world
  // ranks): concatenated, they are the whole tensor when split along
  // dimension 0; along a later one, each row's pieces are interleaved.
  for (auto &[name, v] : out) {
    const Param &p = impl->prog.params[pos[name]];
    if (p.tpDim <= 0 || impl->T < 2)
      continue;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < p.tpDim; ++d)
      outer *= p.type.shape[size_t(d)];
    for (size_t d = size_t(p.tpDim) + 1; d < p.type.shape.size(); ++d)
      inner *= p.type.shape[d];
    int64_t block = p.type.shape[size_t(p.tpDim)] * inner, T = impl->T;
    std::vector<float> whole(v.size());
    for (int64_t r = 0; r < T; ++r)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(whole.data() + (o * T + r) * block,
                    v.data() + (r * outer + o) * block, size_t(block) * 4);
    v = std::move(whole);
  }
  std::sort(out.begin(), out.end(),
            [&](auto &a, auto &b) { return pos[a.first] < pos[b.first]; });
  // The load-balancing biases (model state, equal on every rank) after the
  // parameters, by name.
  for (auto &[name, b] : impl->moeBiases)
    out.emplace_back(name, b.bias);
  // Tied parameters: the two copies must hold the same bits (world rank 0,
  // which alone has the gathered tensors).
  std::map<std::string, const std::vector<float> *> byName;
  for (auto &[name, v] : out)
    byName[name] = &v;
  for (auto &[name, v] : out) {
    const std::string &to = impl->prog.params[pos[name]].tiedTo;
    auto it = byName.find(to);
    if (!to.empty() && it != byName.end() && *it->second != v)
      return Status::error("tied parameters '" + name + "' and '" + to +
                           "' hold different values");
  }
  return out;
}

} // namespace pipeforge::rt
