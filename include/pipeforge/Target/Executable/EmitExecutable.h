//===- EmitExecutable.h - A stand-alone executable for one job ---*- C++
//-*-===//
//
// `pipeforge-compile ... --emit exe -o train` (docs/compile.md): LLVM builds
// a module holding the program file's bytes as a constant and a `main` that
// hands them, with argc/argv, to the runtime's pipeforge_rt_main_embedded;
// the host's TargetMachine emits the object file, and the system C++ driver
// links it against libpipeforge-rt-driver.so (found next to the tool:
// <bindir>/../lib, or given). The executable takes pipeforge-run's options:
//
//   mpirun -np 4 ./train --steps 20   ==   mpirun -np 4 pipeforge-run prog.pfp
//   --steps 20
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_TARGET_EXECUTABLE_EMITEXECUTABLE_H
#define PIPEFORGE_TARGET_EXECUTABLE_EMITEXECUTABLE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace pipeforge::target {

struct ExecutableOptions {
  /// The folder holding libpipeforge-rt-driver.so (also the executable's
  /// run path).
  std::string runtimeLibDir;
  /// The program that links (a C++ compiler driver).
  std::string linker = "c++";
};

/// The file name of the runtime library the executables link.
inline constexpr llvm::StringLiteral kRuntimeDriverLibrary =
    "libpipeforge-rt-driver.so";

/// Writes the executable `outPath` for `program` (a serialized program
/// file). Errors: no native target, code generation, the linker missing or
/// failing (with its exit code and command line).
llvm::Error emitExecutable(llvm::StringRef program, llvm::StringRef outPath,
                           const ExecutableOptions &o);

/// `<folder of the running executable>/../lib` when it holds the runtime
/// library, else "". `argv0` and `mainAddr` as for
/// llvm::sys::fs::getMainExecutable.
std::string findRuntimeLibDir(const char *argv0, void *mainAddr);

} // namespace pipeforge::target

#endif // PIPEFORGE_TARGET_EXECUTABLE_EMITEXECUTABLE_H
