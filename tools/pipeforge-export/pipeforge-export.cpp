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
// success, 1 on an error, 2 on bad usage. The flags are one table
// (Support/FlagTable.h), which parses and writes --help.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/HfWeights.h"
#include "pipeforge/Support/FlagTable.h"

#include <cstdio>
#include <string>

using namespace pipeforge::rt;
using pipeforge::flags::Place;

namespace {

struct ExportOptions {
  std::string in, out, tokenizerFrom;
  double shardMb = 5120;
  bool help = false;
};

using O = ExportOptions;

std::optional<std::string> setShardMb(O &o, const std::string &v) {
  return pipeforge::parseNumberOption("--max-shard-mb", v, {0, 1e9, true},
                                      o.shardMb);
}

// Every flag, in the order of the usage text.
const pipeforge::flags::Flag<O> kFlags[] = {
    {"-o", "HF_DIR", Place::Next, &O::out, 0, 0, false,
     "the model directory to write (required)"},
    {"--max-shard-mb", "N", Place::Next, setShardMb, 0, 0, false,
     "at most N MiB per safetensors shard (default\n"
     "5120)"},
    {"--tokenizer-from", "MODEL_DIR", Place::Line, &O::tokenizerFrom, 0, 0,
     false,
     "copy the tokenizer files (and\n"
     "generation_config.json) of a model directory"},
    {"-h", nullptr, Place::Hidden, &O::help},
    {"--help", nullptr, Place::Hidden, &O::help},
};

std::string usageText() {
  return "usage: pipeforge-export CHECKPOINT_DIR -o HF_DIR [options]\n"
         "Writes a checkpoint of any parallel layout as a Hugging Face model "
         "directory\n(config.json, safetensors); see docs/huggingface.md.\n"
         "Options:\n" +
         pipeforge::flags::optionList(kFlags);
}

[[noreturn]] void usage(std::optional<std::string> msg) {
  pipeforge::flags::exitWithUsage("pipeforge-export", msg, usageText());
}

} // namespace

int main(int argc, char **argv) {
  ExportOptions o;
  auto err = pipeforge::flags::parseFlags(
      kFlags, argc, argv, o,
      [&](const std::string &a) -> std::optional<std::string> {
        if (!o.in.empty())
          return std::string("more than one checkpoint folder");
        o.in = a;
        return std::nullopt;
      },
      &O::help);
  if (err || o.help)
    usage(err);
  if (o.in.empty() || o.out.empty())
    usage(std::string("need a checkpoint folder and -o HF_DIR"));
  const std::string &in = o.in, &out = o.out;
  Program prog;
  auto whole = readWholeCheckpoint(in, prog);
  if (!whole) {
    std::fprintf(stderr, "pipeforge-export: %s\n", whole.message().c_str());
    return 1;
  }
  if (Status s = writeHfModel(out, prog, *whole,
                              uint64_t(o.shardMb * double(1 << 20)));
      !s) {
    std::fprintf(stderr, "pipeforge-export: %s\n", s.message().c_str());
    return 1;
  }
  if (!o.tokenizerFrom.empty())
    if (Status s = copyHfCompanionFiles(o.tokenizerFrom, out); !s) {
      std::fprintf(stderr, "pipeforge-export: %s\n", s.message().c_str());
      return 1;
    }
  std::printf("pipeforge-export: %zu tensors of step %s to %s\n",
              whole->size(), in.c_str(), out.c_str());
  return 0;
}
