//===- pipeforge-export.cpp - A checkpoint as a Hugging Face model --------===//
//
//   pipeforge-export CHECKPOINT_DIR -o HF_DIR [--max-shard-mb N]
//                    [--tokenizer-from MODEL_DIR]
//
// CHECKPOINT_DIR is one complete checkpoint (a step-NNNNNNNN folder holding
// every rank's file: pipeline, tensor, expert and data-parallel ranks, with
// or without ZeRO); HF_DIR receives config.json and the safetensors
// (sharded above --max-shard-mb, default 5120) that
// transformers.AutoModelForCausalLM.from_pretrained loads
// (docs/huggingface.md); --tokenizer-from copies the tokenizer files (and
// generation_config.json) of a model directory beside them. Exit 0 on
// success, 1 on an error, 2 on bad usage.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/HfWeights.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace pipeforge::rt;

namespace {
[[noreturn]] void usage(const char *msg) {
  if (msg)
    std::fprintf(stderr, "pipeforge-export: %s\n", msg);
  std::fprintf(msg ? stderr : stdout,
               "usage: pipeforge-export CHECKPOINT_DIR -o HF_DIR "
               "[--max-shard-mb N]\n"
               "                        [--tokenizer-from MODEL_DIR]\n"
               "Writes a checkpoint of any parallel layout as a Hugging Face "
               "model directory\n(config.json, safetensors); see "
               "docs/huggingface.md.\n");
  std::exit(msg ? 2 : 0);
}
} // namespace

int main(int argc, char **argv) {
  std::string in, out, tokenizerFrom;
  double shardMb = 5120;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(nullptr);
    } else if (a == "-o") {
      out = value();
    } else if (a == "--tokenizer-from") {
      tokenizerFrom = value();
    } else if (a == "--max-shard-mb") {
      std::string v = value();
      char *end = nullptr;
      shardMb = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end || !(shardMb > 0) || shardMb > 1e9)
        usage(("--max-shard-mb must be a positive number, got '" + v + "'")
                  .c_str());
    } else if (!a.empty() && a[0] == '-') {
      usage(("unknown option '" + a + "'").c_str());
    } else if (in.empty()) {
      in = a;
    } else {
      usage("more than one checkpoint folder");
    }
  }
  if (in.empty() || out.empty())
    usage("need a checkpoint folder and -o HF_DIR");
  Program prog;
  auto whole = readWholeCheckpoint(in, prog);
  if (!whole) {
    std::fprintf(stderr, "pipeforge-export: %s\n", whole.message().c_str());
    return 1;
  }
  if (Status s = writeHfModel(out, prog, *whole,
                              uint64_t(shardMb * double(1 << 20)));
      !s) {
    std::fprintf(stderr, "pipeforge-export: %s\n", s.message().c_str());
    return 1;
  }
  if (!tokenizerFrom.empty())
    if (Status s = copyHfCompanionFiles(tokenizerFrom, out); !s) {
      std::fprintf(stderr, "pipeforge-export: %s\n", s.message().c_str());
      return 1;
    }
  std::printf("pipeforge-export: %zu tensors of step %s to %s\n",
              whole->size(), in.c_str(), out.c_str());
  return 0;
}
