//===- OutputFile.h - Checked writes through llvm::ToolOutputFile ---------===//
//
// A raw_fd_ostream that saw a write error (a full device, an I/O error)
// calls report_fatal_error ("LLVM ERROR: IO failure on output stream") in
// its destructor. The tools flush their output with finishOutput before
// keep(): a write error becomes the tool's one-line error and exit code 1,
// and the ToolOutputFile, not kept, removes a partial regular file (LLVM
// never removes anything but regular files: /dev/full stays a device).
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_SUPPORT_OUTPUTFILE_H
#define PIPEFORGE_SUPPORT_OUTPUTFILE_H

#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace pipeforge {

/// Flushes `os`; on a write error returns "cannot write 'NAME': REASON" and
/// clears the error (so that the stream's destructor does not abort).
inline std::optional<std::string> finishStream(llvm::raw_fd_ostream &os,
                                               llvm::StringRef name) {
  os.flush();
  if (!os.has_error())
    return std::nullopt;
  std::string msg =
      "cannot write '" + name.str() + "': " + os.error().message();
  os.clear_error();
  return msg;
}

/// finishStream for a ToolOutputFile; keeps the file when the write worked.
inline std::optional<std::string> finishOutput(llvm::ToolOutputFile &out) {
  auto err = finishStream(out.os(), out.getFilename() == "-"
                                        ? llvm::StringRef("<stdout>")
                                        : out.getFilename());
  if (!err)
    out.keep();
  return err;
}

} // namespace pipeforge

#endif // PIPEFORGE_SUPPORT_OUTPUTFILE_H
