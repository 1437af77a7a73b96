//===- ManifestFuzzer.cpp - checkpoint manifest reader --------------------===//
//
// What pipeforge-run --resume reads first: readManifest on a folder whose
// manifest.txt is the input (written to a private temporary folder).
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/rt/Checkpoint.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace pipeforge;

namespace {
/// A private folder, removed at exit (the string is never destroyed, so
/// the exit handler can still read it).
const std::string &folder() {
  static const std::string *dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("pipeforge-manifest-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    auto *s = new std::string(d.string());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(folder(), ec);
    });
    return s;
  }();
  return *dir;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  {
    std::ofstream os(folder() + "/manifest.txt",
                     std::ios::binary | std::ios::trunc);
    os.write(reinterpret_cast<const char *>(data), std::streamsize(size));
  }
  auto m = rt::readManifest(folder());
  if (m && m->files.size() != m->numRanks)
    fuzz::invariantBroken("a manifest whose file list is not its rank count");
  return 0;
}
