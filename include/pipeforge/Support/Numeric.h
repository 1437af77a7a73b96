//===- Numeric.h - Size limits, checked arithmetic, numeric options -------===//
//
// Plain C++17, header-only, no MLIR or LLVM: the compiler (lib/, tools/) and
// the runtime (runtime/, which never links MLIR/LLVM) both include it. It
// holds
//
//   - the documented size limits of every tensor (docs/reliability.md): a
//     dimension is at most kMaxDimension, a tensor at most kMaxTensorBytes;
//   - overflow-checked products of tensor shapes;
//   - one parser for numeric command-line options: the whole text must be a
//     finite number (no NaN, no inf) inside the option's range, or the
//     message names the option, the range and the text.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_SUPPORT_NUMERIC_H
#define PIPEFORGE_SUPPORT_NUMERIC_H

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace pipeforge {

/// The largest dimension of any tensor (config sizes, IR types, program
/// files): 2^24.
constexpr int64_t kMaxDimension = int64_t(1) << 24;
/// The largest tensor, in bytes: 2^40 (1 TiB).
constexpr int64_t kMaxTensorBytes = int64_t(1) << 40;

/// The largest step count: training steps (--steps), a checkpoint's step and
/// an optimizer's step count: 2^40.
constexpr int64_t kMaxSteps = int64_t(1) << 40;

/// `a * b` for non-negative operands, or nullopt when it overflows int64_t.
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// `a + b`, or nullopt when it overflows int64_t.
inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// The shape as text: [2x16x64].
inline std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Empty when every dimension is in [1, kMaxDimension] and the tensor has at
/// most kMaxTensorBytes bytes of `elementBytes` each; otherwise why not
/// (without a subject: the caller names the tensor or the key).
inline std::string checkTensorShape(const std::vector<int64_t> &shape,
                                    int64_t elementBytes) {
  int64_t bytes = elementBytes;
  for (int64_t d : shape) {
    if (d < 1)
      return "shape " + shapeText(shape) + " has a non-positive dimension";
    if (d > kMaxDimension)
      return "shape " + shapeText(shape) + " has a dimension above the limit " +
             std::to_string(kMaxDimension) + " (2^24)";
    auto b = checkedMul(bytes, d);
    if (!b || *b > kMaxTensorBytes)
      return "shape " + shapeText(shape) + " has more than " +
             std::to_string(kMaxTensorBytes) + " bytes (2^40, the limit)";
    bytes = *b;
  }
  return "";
}

/// A closed or half-open range for a numeric option.
struct NumberRange {
  double lo, hi;
  bool loOpen = false; ///< (lo, hi] instead of [lo, hi]
};

/// The range as text: [0, 1], (0, 1e+06].
inline std::string rangeText(const NumberRange &r) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s%g, %g]", r.loOpen ? "(" : "[", r.lo, r.hi);
  return buf;
}

/// Parses `text` as a finite number in `range` into `out`. On failure
/// returns "OPTION must be a finite number in RANGE, got 'TEXT'".
inline std::optional<std::string> parseNumberOption(const std::string &option,
                                                    const std::string &text,
                                                    NumberRange range,
                                                    double &out) {
  char *end = nullptr;
  errno = 0;
  double d = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  bool ok = !text.empty() && end && *end == '\0' && std::isfinite(d) &&
            (range.loOpen ? d > range.lo : d >= range.lo) && d <= range.hi;
  if (!ok)
    return option + " must be a finite number in " + rangeText(range) +
           ", got '" + text + "'";
  out = d;
  return std::nullopt;
}

/// Parses `text` as a decimal integer in [lo, hi] into `out` (no fraction,
/// no exponent, no trailing characters). On failure returns
/// "OPTION must be an integer in [LO, HI], got 'TEXT'".
inline std::optional<std::string> parseIntOption(const std::string &option,
                                                 const std::string &text,
                                                 int64_t lo, int64_t hi,
                                                 int64_t &out) {
  char *end = nullptr;
  errno = 0;
  long long v = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 10);
  bool ok = !text.empty() && end && *end == '\0' && errno != ERANGE &&
            v >= lo && v <= hi;
  if (!ok)
    return option + " must be an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "], got '" + text + "'";
  out = int64_t(v);
  return std::nullopt;
}

/// Checks an already parsed number (an option parsed by someone else, e.g.
/// llvm::cl) the same way as parseNumberOption.
inline std::optional<std::string>
checkNumberOption(const std::string &option, double value, NumberRange range) {
  if (std::isfinite(value) &&
      (range.loOpen ? value > range.lo : value >= range.lo) &&
      value <= range.hi)
    return std::nullopt;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", value);
  return option + " must be a finite number in " + rangeText(range) +
         ", got '" + buf + "'";
}

/// Checks an already parsed integer the same way as parseIntOption.
inline std::optional<std::string> checkIntOption(const std::string &option,
                                                 int64_t value, int64_t lo,
                                                 int64_t hi) {
  if (value >= lo && value <= hi)
    return std::nullopt;
  return option + " must be an integer in [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "], got '" + std::to_string(value) + "'";
}

} // namespace pipeforge

#endif // PIPEFORGE_SUPPORT_NUMERIC_H
