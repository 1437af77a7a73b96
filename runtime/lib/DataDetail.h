//===- DataDetail.h - What Data.cpp and DataFormats.cpp share ---*- C++ -*-===//
//
// Private to runtime/lib: the batch arguments every DataSource checks.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_LIB_DATADETAIL_H
#define PIPEFORGE_RT_LIB_DATADETAIL_H

#include "pipeforge/rt/Data.h"

namespace pipeforge::rt::detail {

/// b, s >= 1, mb, step >= 0, non-null buffers.
Status checkBatchArgs(int64_t mb, int64_t step, int64_t b, int64_t s,
                      const int32_t *tokens, const int32_t *targets);

} // namespace pipeforge::rt::detail

#endif // PIPEFORGE_RT_LIB_DATADETAIL_H
