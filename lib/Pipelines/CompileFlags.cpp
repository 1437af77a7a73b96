//===- CompileFlags.cpp - The compile options as command-line flags -------===//
//
// pipeforge-compile (every phase), pipeforge-import (load) and
// pipeforge-translate (lowering, as --pp-program-*) declare their flags from
// forEachCompileOption, so a flag's name, help and default exist once.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Pipelines/CompilePipeline.h"

#include "llvm/ADT/STLExtras.h"

#include <type_traits>

namespace cl = llvm::cl;

namespace pipeforge::pipelines {

namespace {
template <typename T> struct FlagFor {
  using type = cl::opt<T>;
};
template <> struct FlagFor<std::vector<int64_t>> {
  using type = cl::list<int64_t>;
};
} // namespace

bool CompileFlags::selected(const OptionInfo &info) const {
  return llvm::is_contained(phases, info.phase);
}

CompileFlags::CompileFlags(cl::OptionCategory &category,
                           std::vector<OptionPhase> phasesIn,
                           llvm::StringRef prefix)
    : phases(std::move(phasesIn)) {
  CompileOptions defaults;
  forEachCompileOption(defaults, [&](const OptionInfo &info, auto &field) {
    if (!selected(info))
      return;
    using T = std::decay_t<decltype(field)>;
    names.push_back(std::make_unique<std::string>((prefix + info.name).str()));
    llvm::StringRef name = *names.back();
    cl::desc help(info.help);
    cl::value_desc valueDesc(info.valueDesc);
    if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      flags.push_back(std::make_unique<cl::list<int64_t>>(
          name, help, valueDesc, cl::CommaSeparated, cl::cat(category)));
    } else if constexpr (std::is_same_v<T, bool>) {
      flags.push_back(std::make_unique<cl::opt<bool>>(name, help,
                                                      cl::init(field),
                                                      cl::cat(category)));
    } else {
      auto flag = std::make_unique<cl::opt<T>>(name, help, valueDesc,
                                               cl::init(field),
                                               cl::cat(category));
      if (info.valueOptional)
        flag->setValueExpectedFlag(cl::ValueOptional);
      flags.push_back(std::move(flag));
    }
  });
}

CompileFlags::~CompileFlags() = default;

void CompileFlags::apply(CompileOptions &o) const {
  readCompileOptions<FlagFor>(
      o, flags, [&](const OptionInfo &info) { return selected(info); });
}

} // namespace pipeforge::pipelines
