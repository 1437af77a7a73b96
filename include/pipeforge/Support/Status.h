//===- Status.h - Errors as values: Status and Expected ---------*- C++ -*-===//
//
// Plain C++ (no MLIR, no LLVM), header-only: the error type every part of
// the tree returns, the compiler's plain libraries (schedule, partition,
// planner), the contract (program file, op shapes) and the runtime. No
// exceptions, no asserts on user input: a function that can fail on its
// input returns a Status, or an Expected<T> holding either a T or the
// Status that says why there is none.
//
// sched:: and rt:: keep `using` aliases (Schedule/Action.h, rt/Program.h,
// rt/Data.h, rt/Optimizer.h), so sched::Status and rt::Status name this
// class.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SUPPORT_STATUS_H
#define PIPEFORGE_SUPPORT_STATUS_H

#include <optional>
#include <string>
#include <utility>

namespace pipeforge {

class Status {
public:
  static Status ok() { return Status(); }
  static Status error(std::string msg) { return Status(std::move(msg)); }
  /// An error about one action: rank `rank`'s program at index `step`.
  static Status errorAt(int rank, long step, std::string msg) {
    Status s(std::move(msg));
    s.rankIdx = rank;
    s.stepIdx = step;
    return s;
  }
  bool isOk() const { return !err.has_value(); }
  /// Where the error is, when it is about one action (else -1).
  int rank() const { return rankIdx; }
  long step() const { return stepIdx; }
  explicit operator bool() const { return isOk(); }
  const std::string &message() const {
    static const std::string empty;
    return err ? *err : empty;
  }

private:
  Status() = default;
  explicit Status(std::string m) : err(std::move(m)) {}
  std::optional<std::string> err;
  int rankIdx = -1;
  long stepIdx = -1;
};

template <typename T> class Expected {
public:
  Expected(T v) : val(std::move(v)) {}
  Expected(Status s) : st(std::move(s)) {}
  bool isOk() const { return val.has_value(); }
  explicit operator bool() const { return isOk(); }
  T &operator*() { return *val; }
  const T &operator*() const { return *val; }
  T *operator->() { return &*val; }
  const T *operator->() const { return &*val; }
  T take() { return std::move(*val); }
  const std::string &message() const { return st.message(); }
  Status status() const { return isOk() ? Status::ok() : st; }

private:
  std::optional<T> val;
  Status st = Status::ok();
};

} // namespace pipeforge

#endif // PIPEFORGE_SUPPORT_STATUS_H
