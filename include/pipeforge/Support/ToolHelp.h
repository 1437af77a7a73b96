//===- ToolHelp.h - Keep a tool's --help to its own options -----*- C++ -*-===//
//
// The tools link LLVM and MLIR, which register a few hundred options of
// their own (codegen, profiling, every target). hideForeignOptions hides
// every option that is neither in one of the tool's categories nor named in
// `keep`: they move to --help-hidden / --help-list-hidden (cl::Hidden, not
// cl::ReallyHidden as cl::HideUnrelatedOptions does) and still parse.
// parseToolCommandLine is the tools' one way to parse: a bad flag exits 2.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_SUPPORT_TOOLHELP_H
#define PIPEFORGE_SUPPORT_TOOLHELP_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace pipeforge {

inline void
hideForeignOptions(llvm::ArrayRef<const llvm::cl::OptionCategory *> categories,
                   llvm::ArrayRef<llvm::StringRef> keep = {}) {
  namespace cl = llvm::cl;
  for (auto &entry : cl::getRegisteredOptions()) {
    cl::Option *opt = entry.second;
    if (opt->getOptionHiddenFlag() != cl::NotHidden)
      continue;
    // --help, --help-list, --version: LLVM's generic category.
    bool ours = llvm::any_of(opt->Categories, [&](cl::OptionCategory *c) {
      return c->getName() == "Generic Options" ||
             llvm::is_contained(categories, c);
    });
    if (!ours && !llvm::is_contained(keep, entry.first))
      opt->setHiddenFlag(cl::Hidden);
  }
}

/// cl::ParseCommandLineOptions with the tools' one convention for a bad
/// flag: LLVM's message naming the flag, a pointer to --help, exit code 2
/// (a usage error; 1 is a failed run). --help and --version exit 0.
inline void parseToolCommandLine(int argc, const char *const *argv,
                                 llvm::StringRef overview) {
  if (!llvm::cl::ParseCommandLineOptions(argc, argv, overview,
                                         &llvm::errs())) {
    llvm::errs() << "(run with --help for usage)\n";
    std::exit(2);
  }
}

} // namespace pipeforge

#endif // PIPEFORGE_SUPPORT_TOOLHELP_H
