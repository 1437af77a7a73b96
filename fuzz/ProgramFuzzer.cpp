//===- ProgramFuzzer.cpp - program file reader + validator ----------------===//
//
// What pipeforge-run and pipeforge-compile --check do: parseProgram (the
// header, the JSON body, every field, then validateProgram). An input that
// starts with the magic "PFPROG" is the whole file; anything else is taken
// as the JSON body and given a correct header, so the mutations reach the
// body's fields instead of failing the checksum. A program that loads must
// also dump, and serialize to a file that loads again.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/rt/Program.h"

#include <cstring>

using namespace pipeforge;

namespace {
void putLE(std::string &s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    s.push_back(char(uint8_t(v >> (8 * i))));
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  std::string in(reinterpret_cast<const char *>(data), size);
  std::string file;
  if (size >= 6 && std::memcmp(data, "PFPROG", 6) == 0) {
    file = in;
  } else {
    file.assign("PFPROG\0\0", 8);
    putLE(file, rt::Program::kVersion, 4);
    putLE(file, 0, 4);
    putLE(file, in.size(), 8);
    putLE(file, rt::programChecksum(in), 8);
    file += in;
  }
  auto p = rt::parseProgram(file);
  if (!p)
    return 0;
  (void)rt::dumpProgram(*p);
  auto again = rt::parseProgram(rt::serializeProgram(*p));
  if (!again)
    fuzz::invariantBroken("a loaded program does not load after writing: " +
                          again.message());
  return 0;
}
