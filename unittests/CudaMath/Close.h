//===- Close.h - Tensor comparisons of the CUDA math tests ------*- C++ -*-===//
//
// The two verdicts of unittests/CudaMath: the same bits, or close relative
// to the tensor's scale (many elements are near zero, so a per-element
// relative error would say nothing).
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_UNITTESTS_CUDAMATH_CLOSE_H
#define PIPEFORGE_UNITTESTS_CUDAMATH_CLOSE_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace pipeforge::rt::cudatest {

inline bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

/// max |got - ref| <= relTol * max |ref|, and no NaN in got.
inline void expectClose(const std::vector<float> &got,
                        const std::vector<float> &ref, const std::string &what,
                        double relTol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double scale = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " [" << i << "] is NaN";
    scale = std::max(scale, std::fabs(double(ref[i])));
    err = std::max(err, std::fabs(double(got[i]) - double(ref[i])));
  }
  EXPECT_LE(err, relTol * std::max(scale, 1e-30))
      << what << ": max abs err " << err << ", max abs ref " << scale;
}

} // namespace pipeforge::rt::cudatest

#endif // PIPEFORGE_UNITTESTS_CUDAMATH_CLOSE_H
