//===- TextFormat.h - printf-style text for the planner's reports -*- C++
//-*-===//
//
// Internal to lib/Plan: the formatting helpers Report.cpp and Compare.cpp
// share.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_LIB_PLAN_TEXTFORMAT_H
#define PIPEFORGE_LIB_PLAN_TEXTFORMAT_H

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace pipeforge::plan::text {

/// printf into a std::string (lines of the reports: under 1 KiB).
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string
fmt(const char *f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

inline double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

/// A time in ms with four significant digits, without an exponent (18450,
/// not 1.845e+04) and with float noise shown as 0.
inline std::string msText(double v) {
  if (std::fabs(v) < 5e-10)
    return "0";
  if (std::fabs(v) >= 1e4)
    return fmt("%.0f", v);
  return fmt("%.4g", v);
}

} // namespace pipeforge::plan::text

#endif // PIPEFORGE_LIB_PLAN_TEXTFORMAT_H
