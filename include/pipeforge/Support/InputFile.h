//===- InputFile.h - What a tool may read as a whole input file -----------===//
//
// Plain C++17 and POSIX, header-only, no MLIR or LLVM: the tools, the
// compiler's libraries, the contract and the runtime all include it.
//
// The rule (docs/reliability.md): a file a tool reads whole is a regular
// file it can read, or standard input where the tool takes it ("-", and
// "/dev/stdin"). Anything else is refused by name before it is opened: a
// directory, a FIFO (opening one blocks until a writer comes, and reading
// it never ends while the writer lives), a device (/dev/zero never ends), a
// socket, a missing or unreadable file. The check runs before the open, so
// a FIFO is refused without blocking.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_SUPPORT_INPUTFILE_H
#define PIPEFORGE_SUPPORT_INPUTFILE_H

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pipeforge {

/// Standard input by name: "-" or "/dev/stdin" (a pipe from the shell).
inline bool isStdinPath(const std::string &path) {
  return path == "-" || path == "/dev/stdin";
}

/// "" when `path` is a regular file this process can open for reading (or
/// standard input, when `allowStdin`), else one line naming the path:
///   P: cannot read: No such file or directory
///   P: is a directory, not a file
///   P: is a FIFO, not a regular file (pipe the data to standard input ...)
///   P: is a device, not a regular file
///   P: cannot read: Permission denied
inline std::string inputFileProblem(const std::string &path,
                                    bool allowStdin = true) {
  if (allowStdin && isStdinPath(path))
    return "";
  if (path.empty())
    return "an empty file name";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return path + ": cannot read: " + std::strerror(errno);
  if (S_ISDIR(st.st_mode))
    return path + ": is a directory, not a file";
  if (S_ISFIFO(st.st_mode))
    return path + ": is a FIFO, not a regular file" +
           (allowStdin ? std::string(" (pipe the data to standard input "
                                     "and give '-')")
                       : std::string());
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    return path + ": is a device, not a regular file";
  if (!S_ISREG(st.st_mode))
    return path + ": is not a regular file";
  // Opening a regular file does not block; it reports what stat cannot
  // (permissions, as any user but root sees them).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return path + ": cannot read: " + std::strerror(errno);
  ::close(fd);
  return "";
}

/// The whole of `path` into `out` (standard input for "-" and
/// "/dev/stdin" when `allowStdin`); false with `error` set (inputFileProblem's line, or a read
/// error naming the path). A regular file is read into a string of its
/// size; a read error part way (EIO) is an error, never a short input.
inline bool readInputFile(const std::string &path, std::string &out,
                          std::string &error, bool allowStdin = true) {
  out.clear();
  if (std::string p = inputFileProblem(path, allowStdin); !p.empty()) {
    error = p;
    return false;
  }
  const bool stdinInput = allowStdin && isStdinPath(path);
  int fd = stdinInput ? 0 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = path + ": cannot read: " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    try {
      out.reserve(size_t(st.st_size));
    } catch (...) {
      if (!stdinInput)
        ::close(fd);
      error = path + ": cannot read: too large to hold in memory";
      return false;
    }
  }
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      error = path + ": cannot read: " + std::strerror(errno);
      if (!stdinInput)
        ::close(fd);
      out.clear();
      return false;
    }
    try {
      out.append(buf, size_t(n));
    } catch (...) {
      if (!stdinInput)
        ::close(fd);
      out.clear();
      error = path + ": cannot read: too large to hold in memory";
      return false;
    }
  }
  if (!stdinInput)
    ::close(fd);
  return true;
}

} // namespace pipeforge

#endif // PIPEFORGE_SUPPORT_INPUTFILE_H
