//===- pipeforge-tokenize.cpp - Text file to PFTOK token file -------------===//
//
// Byte-level tokenization (one token per byte, vocab 256) of a text file
// into the token-file format of docs/runtime-data.md, which pipeforge-run
// reads with --data FILE. Also checks an existing token file (--check).
//
//   pipeforge-tokenize corpus.txt -o corpus.pftok [--width 2|4]
//   pipeforge-tokenize --check corpus.pftok
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Data.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace pipeforge::rt;

namespace {

void usage(FILE *f) {
  std::fprintf(f, "usage: pipeforge-tokenize INPUT.txt -o OUTPUT.pftok "
                  "[--width 2|4]\n"
                  "       pipeforge-tokenize --check FILE.pftok\n"
                  "Byte-level tokens (vocab 256); see docs/runtime-data.md.\n");
}

} // namespace

int main(int argc, char **argv) {
  std::string input, output, check;
  uint32_t width = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *opt) -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "pipeforge-tokenize: %s needs a value\n", opt);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-o") {
      output = value("-o");
    } else if (a == "--width") {
      std::string w = value("--width");
      if (w != "2" && w != "4") {
        std::fprintf(stderr,
                     "pipeforge-tokenize: --width must be 2 or 4, got '%s'\n",
                     w.c_str());
        return 2;
      }
      width = uint32_t(std::atoi(w.c_str()));
    } else if (a == "--check") {
      check = value("--check");
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "pipeforge-tokenize: unknown option '%s'\n",
                   a.c_str());
      usage(stderr);
      return 2;
    } else if (input.empty()) {
      input = a;
    } else {
      std::fprintf(stderr, "pipeforge-tokenize: more than one input\n");
      return 2;
    }
  }
  if (!check.empty()) {
    auto tf = TokenFile::open(check);
    if (!tf) {
      std::fprintf(stderr, "pipeforge-tokenize: %s\n", tf.message().c_str());
      return 1;
    }
    std::printf("%s: ok, %llu tokens of %u bytes, vocab %lld\n", check.c_str(),
                (unsigned long long)(*tf)->size(), (*tf)->width(),
                (long long)(*tf)->vocabSize());
    return 0;
  }
  if (input.empty() || output.empty()) {
    usage(stderr);
    return 2;
  }
  uint64_t count = 0;
  Status st = tokenizeTextFile(input, output, width, &count);
  if (!st) {
    std::fprintf(stderr, "pipeforge-tokenize: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("%s: %llu tokens (byte-level, vocab 256, %u-byte) -> %s\n",
              input.c_str(), (unsigned long long)count, width, output.c_str());
  return 0;
}
