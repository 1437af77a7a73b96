//===- MoERouting.h - nn.moe routing of one token, host and device -*- C++ -*-===//
//
// The router of nn.moe for one token, written once for every place that
// routes: the CPU kernels (KernelsMoE.cpp, float and double), the
// expert-parallel path (runtime/lib/MoEParallel.cpp) and the CUDA kernels
// (cuda/MoEMath.h). Every function is PF_HOST_DEVICE and needs no scratch
// beyond its arguments, so all three route bitwise alike.
//
// Routing (MoEShape's routing fields; the defaults are Mixtral's):
//   scores s = softmax(logits) or sigmoid(logits)          (`scoring`)
//   choice c = s + bias (bias: optional per-expert, only for choosing)
//   groups:  the E experts form `groups` consecutive groups; a group's
//            score is the max of its c (softmax, DeepSeek-V2's
//            group_limited_greedy) or the sum of its two largest c
//            (sigmoid, DeepSeek-V3's noaux_tc); only the experts of the
//            `topkGroup` best groups are eligible (groups = 1: all are)
//   top-k:   the k largest c among the eligible, descending, ties to the
//            lower index (groups likewise)
//   gates:   w_r = s[top_r] (unbiased); g_r = scale * w_r / sum_q w_q when
//            `renormalize`, else scale * w_r                (`scale` =
//            routed_scaling_factor)
// The choice is a constant for the gradient: dlogits flows through the
// selected w_r only (the renormalisation, then the softmax or sigmoid).
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CPU_MOEROUTING_H
#define PIPEFORGE_RUNTIME_CPU_MOEROUTING_H

#include "ElementwiseMath.h"
#include "Kernels.h"

#include <stdint.h>

namespace pipeforge {
namespace rt {
namespace cpu {

/// Turns one token's router logits [E] into scores in place.
template <typename T>
PF_HOST_DEVICE inline void moeScoreToken(const MoEShape &s, T *row) {
  const long long E = s.experts;
  if (s.scoring == MoEScoring::Sigmoid) {
    for (long long e = 0; e < E; ++e)
      row[e] = math::sigmoid(row[e]);
    return;
  }
  T m = row[0];
  for (long long e = 1; e < E; ++e)
    m = row[e] > m ? row[e] : m;
  T sum = 0;
  for (long long e = 0; e < E; ++e) {
    row[e] = math::softmaxExp(row[e], m);
    sum += row[e];
  }
  T inv = T(1) / sum;
  for (long long e = 0; e < E; ++e)
    row[e] *= inv;
}

/// The choice value of expert e: its score plus its bias, if any.
template <typename T>
PF_HOST_DEVICE inline T moeChoice(const T *scores, const T *bias, long long e) {
  return bias ? scores[e] + bias[e] : scores[e];
}

/// Group g's score: max of its choice values (softmax) or the sum of its two
/// largest (sigmoid; the one value for a group of one expert).
template <typename T>
PF_HOST_DEVICE inline T moeGroupScore(const MoEShape &s, const T *scores,
                                      const T *bias, long long g) {
  const long long per = s.experts / s.groups, e0 = g * per;
  long long b1 = e0, b2 = -1;
  for (long long e = e0 + 1; e < e0 + per; ++e) {
    T c = moeChoice(scores, bias, e);
    if (c > moeChoice(scores, bias, b1)) {
      b2 = b1;
      b1 = e;
    } else if (b2 < 0 || c > moeChoice(scores, bias, b2)) {
      b2 = e;
    }
  }
  T best = moeChoice(scores, bias, b1);
  if (s.scoring == MoEScoring::Softmax || b2 < 0)
    return best;
  return best + moeChoice(scores, bias, b2);
}

/// The eligible groups as a bit mask (bit g set: group g's experts may be
/// chosen): the topkGroup best group scores, ties to the lower group.
/// groups <= 64 (isValid); one group: all.
template <typename T>
PF_HOST_DEVICE inline uint64_t moeEligibleGroups(const MoEShape &s,
                                                 const T *scores,
                                                 const T *bias) {
  if (s.groups <= 1)
    return ~uint64_t(0);
  uint64_t mask = 0;
  for (long long r = 0; r < s.topkGroup; ++r) {
    long long best = -1;
    T bestScore = 0;
    for (long long g = 0; g < s.groups; ++g) {
      if (mask >> g & 1)
        continue;
      T gs = moeGroupScore(s, scores, bias, g);
      if (best < 0 || gs > bestScore) {
        best = g;
        bestScore = gs;
      }
    }
    if (best < 0)
      break;
    mask |= uint64_t(1) << best;
  }
  return mask;
}

/// One token's top-k and gates from its scores [E] (moeScoreToken's) and the
/// optional bias [E]. The r-th pick is the first eligible expert of the order
/// (c descending, index ascending) after pick r-1, so no "taken" array is
/// needed.
template <typename T>
PF_HOST_DEVICE inline void moeSelectToken(const MoEShape &s, const T *scores,
                                          const T *bias, int32_t *topIdx,
                                          T *gates) {
  const long long E = s.experts, K = s.topK;
  const long long per = s.groups > 1 ? E / s.groups : E;
  const uint64_t groups = moeEligibleGroups(s, scores, bias);
  T topSum = 0;
  long long prev = -1;
  for (long long r = 0; r < K; ++r) {
    long long best = -1;
    T prevC = prev < 0 ? T(0) : moeChoice(scores, bias, prev);
    for (long long e = 0; e < E; ++e) {
      if (s.groups > 1 && !(groups >> (e / per) & 1))
        continue;
      T c = moeChoice(scores, bias, e);
      bool after = prev < 0 || c < prevC || (c == prevC && e > prev);
      if (after && (best < 0 || c > moeChoice(scores, bias, best)))
        best = e;
    }
    // Only NaN scores leave no candidate; keep the index in range.
    if (best < 0)
      best = 0;
    topIdx[r] = int32_t(best);
    topSum += scores[best];
    prev = best;
  }
  const T scale = T(s.scale);
  for (long long r = 0; r < K; ++r) {
    T w = scores[topIdx[r]];
    gates[r] = (s.renormalize ? w / topSum : w) * scale;
  }
}

/// One token's router gradient: dg [K] (dL/dgate) -> dlogits [E] through
/// the scaling, the renormalisation over the top-k and the softmax or
/// sigmoid; the choice is a constant.
template <typename T>
PF_HOST_DEVICE inline void
moeRouterGradToken(const MoEShape &s, const T *scores, const int32_t *topIdx,
                   const T *gates, const T *dg, T *dlogits) {
  const long long E = s.experts, K = s.topK;
  const T scale = T(s.scale);
  T sumW = 0, dotG = 0;
  for (long long r = 0; r < K; ++r) {
    sumW += scores[topIdx[r]];
    dotG += dg[r] * gates[r];
  }
  // g_r = c w_r / S  =>  dw_r = (c dg_r - sum_q dg_q g_q) / S;
  // g_r = c w_r      =>  dw_r = c dg_r.
  auto dwOf = [&](long long e) {
    for (long long r = 0; r < K; ++r)
      if (topIdx[r] == e)
        return s.renormalize ? (scale * dg[r] - dotG) / sumW : scale * dg[r];
    return T(0);
  };
  if (s.scoring == MoEScoring::Sigmoid) {
    for (long long e = 0; e < E; ++e) {
      T p = scores[e];
      dlogits[e] = dwOf(e) * p * (T(1) - p);
    }
    return;
  }
  T dot = 0;
  for (long long e = 0; e < E; ++e)
    dot += scores[e] * dwOf(e);
  for (long long e = 0; e < E; ++e)
    dlogits[e] = math::softmaxGrad(scores[e], dwOf(e), dot);
}

} // namespace cpu
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CPU_MOEROUTING_H
