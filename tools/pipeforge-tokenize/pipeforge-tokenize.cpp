//===- pipeforge-tokenize.cpp - Text file to PFTOK token file -------------===//
//
// Tokenizes text into the token-file format of docs/runtime-data.md, which
// pipeforge-run reads with --data FILE. Byte-level by default (one token
// per byte, vocab 256); with --tokenizer, the model's own tokenizer (a
// Hugging Face tokenizer.json with byte-level BPE, or a SentencePiece
// tokenizer.model: runtime/include/pipeforge/rt/Tokenizer.h), every
// document ending with the tokenizer's EOS. Also checks an existing token
// file (--check) and decodes one back to text (--decode). The flags are one
// table (Support/FlagTable.h), which parses and writes --help's option list.
//
//   pipeforge-tokenize corpus.txt -o corpus.pftok [--width 2|4]
//   pipeforge-tokenize --tokenizer tokenizer.json a.txt b.txt -o out.pftok
//   pipeforge-tokenize --check corpus.pftok
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Data.h"
#include "pipeforge/rt/Tokenizer.h"
#include "pipeforge/Support/FlagTable.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace pipeforge::rt;
using pipeforge::flags::Place;

namespace {

/// \n, \t, \r and \\ in a --doc-separator.
std::string unescape(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct TokenizeArgs {
  std::vector<std::string> inputs;
  std::string output, check, tokenizer, eosArg, decode, piecesInput;
  std::string width; ///< "", "2" or "4"
  std::optional<std::string> separator;
  bool help = false;
};

using O = TokenizeArgs;

std::optional<std::string> setSeparator(O &o, const std::string &v) {
  o.separator = unescape(v);
  return std::nullopt;
}

// Every flag, in the order of the option list.
const pipeforge::flags::Flag<O> kFlags[] = {
    {"-o", "FILE", Place::Line, &O::output, 0, 0, false,
     "the token file to write; with --decode, the text\n"
     "(default: stdout)"},
    {"--width", "2|4", Place::Line, &O::width, 0, 0, true,
     "bytes per token in the file (default: 2, or 4\n"
     "above vocab 65536)"},
    {"--tokenizer", "FILE", Place::Line, &O::tokenizer, 0, 0, false,
     "a Hugging Face tokenizer.json (byte-level BPE), a\n"
     "SentencePiece tokenizer.model, or a folder with one"},
    {"--doc-separator", "STR", Place::Line, setSeparator, 0, 0, false,
     "split every input into documents at STR (\\n, \\t,\n"
     "\\r, \\\\ escapes); default: one document per file"},
    {"--eos", "ID|TOKEN|none", Place::Line, &O::eosArg, 0, 0, false,
     "appended to every document (default: the\n"
     "tokenizer's EOS, e.g. from tokenizer_config.json)"},
    {"--decode", "FILE.pftok", Place::Line, &O::decode, 0, 0, false,
     "the text of a token file (to -o, or stdout)"},
    {"--pieces", "INPUT", Place::Line, &O::piecesInput, 0, 0, false,
     "the pre-tokenized pieces, a JSON string a line"},
    {"--check", "FILE.pftok", Place::Line, &O::check, 0, 0, false,
     "check a token file (tokens, width, vocab)"},
    {"-h", nullptr, Place::Hidden, &O::help},
    {"--help", nullptr, Place::Hidden, &O::help},
};

std::string usageText() {
  return "usage: pipeforge-tokenize INPUT.txt -o OUTPUT.pftok [--width 2|4]\n"
         "       pipeforge-tokenize --tokenizer FILE INPUT... -o OUTPUT.pftok\n"
         "                          [--doc-separator STR] [--eos "
         "ID|TOKEN|none]\n"
         "                          [--width 2|4]\n"
         "       pipeforge-tokenize --tokenizer FILE --decode FILE.pftok [-o "
         "OUT]\n"
         "       pipeforge-tokenize --tokenizer FILE --pieces INPUT\n"
         "       pipeforge-tokenize --check FILE.pftok\n"
         "Without --tokenizer: byte-level tokens (vocab 256), one input.\n"
         "Options:\n" +
         pipeforge::flags::optionList(kFlags) +
         "See docs/runtime-data.md.\n";
}

void usage(FILE *f) { std::fputs(usageText().c_str(), f); }

int fail(const std::string &msg) {
  std::fprintf(stderr, "pipeforge-tokenize: %s\n", msg.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  TokenizeArgs args;
  auto err = pipeforge::flags::parseFlags(
      kFlags, argc, argv, args,
      [&](const std::string &a) -> std::optional<std::string> {
        args.inputs.push_back(a);
        return std::nullopt;
      },
      &O::help);
  if (err || args.help)
    pipeforge::flags::exitWithUsage("pipeforge-tokenize", err, usageText());
  const std::vector<std::string> &inputs = args.inputs;
  const std::string &output = args.output, &check = args.check,
                    &tokenizer = args.tokenizer, &eosArg = args.eosArg,
                    &decode = args.decode, &piecesInput = args.piecesInput;
  const std::optional<std::string> &separator = args.separator;
  const uint32_t width =
      args.width.empty() ? 0 : uint32_t(std::stoi(args.width));
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

  if (tokenizer.empty()) {
    // Byte-level: one input, as before.
    if (!eosArg.empty() || separator || !decode.empty() ||
        !piecesInput.empty()) {
      std::fprintf(stderr, "pipeforge-tokenize: --eos, --doc-separator, "
                           "--decode and --pieces need --tokenizer\n");
      return 2;
    }
    if (inputs.size() > 1) {
      std::fprintf(stderr, "pipeforge-tokenize: more than one input\n");
      return 2;
    }
    if (inputs.empty() || output.empty()) {
      usage(stderr);
      return 2;
    }
    uint64_t count = 0;
    Status st = tokenizeTextFile(inputs[0], output, width ? width : 2, &count);
    if (!st)
      return fail(st.message());
    std::printf("%s: %llu tokens (byte-level, vocab 256, %u-byte) -> %s\n",
                inputs[0].c_str(), (unsigned long long)count, width ? width : 2,
                output.c_str());
    return 0;
  }

  auto tok = loadTokenizer(tokenizer);
  if (!tok)
    return fail(tok.message());

  if (!piecesInput.empty()) {
    auto text = readFileBytes(piecesInput);
    if (!text)
      return fail(text.message());
    auto p = (*tok)->pieces(std::string_view(
        reinterpret_cast<const char *>(text->data()), text->size()));
    if (!p)
      return fail(p.message());
    // One JSON string per line (a piece may hold newlines).
    for (const std::string &s : *p) {
      std::string q = "\"";
      for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
          q += '\\';
          q += char(c);
        } else if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          q += buf;
        } else {
          q += char(c);
        }
      }
      std::printf("%s\"\n", q.c_str());
    }
    return 0;
  }

  if (!decode.empty()) {
    auto tf = TokenFile::open(decode);
    if (!tf)
      return fail(tf.message());
    std::vector<uint32_t> ids((*tf)->size());
    for (uint64_t i = 0; i < ids.size(); ++i)
      ids[i] = (*tf)->token(i);
    auto text = (*tok)->decode(ids);
    if (!text)
      return fail(text.message());
    if (output.empty()) {
      std::fwrite(text->data(), 1, text->size(), stdout);
      return 0;
    }
    Status st = writeFileAtomically(
        output, std::vector<uint8_t>(text->begin(), text->end()));
    return st ? 0 : fail(st.message());
  }

  if (inputs.empty() || output.empty()) {
    usage(stderr);
    return 2;
  }
  TokenizeOptions opts;
  opts.docSeparator = separator;
  opts.width = width;
  if (eosArg == "none") {
    opts.eos = -1;
  } else if (!eosArg.empty()) {
    char *end = nullptr;
    long long v = std::strtoll(eosArg.c_str(), &end, 10);
    if (end && *end == '\0' && v >= 0) {
      opts.eos = v;
    } else if (auto id = (*tok)->tokenId(eosArg)) {
      opts.eos = *id;
    } else {
      return fail("--eos '" + eosArg +
                  "' is neither an id nor a token of the tokenizer");
    }
  }
  TokenizeStats stats;
  Status st = tokenizeDocuments(**tok, inputs, output, opts, &stats);
  if (!st)
    return fail(st.message());
  std::string eos = stats.eos ? "EOS " + std::to_string(*stats.eos) : "no EOS";
  std::printf("%s%s: %llu document%s, %llu tokens (%s, %s, %u-byte) -> %s\n",
              inputs[0].c_str(), inputs.size() > 1 ? " ..." : "",
              (unsigned long long)stats.documents,
              stats.documents == 1 ? "" : "s", (unsigned long long)stats.tokens,
              (*tok)->describe().c_str(), eos.c_str(), stats.width,
              output.c_str());
  double mb = double(stats.bytes) / 1e6;
  std::printf("encoded %.2f MB in %.3f s: %.1f MB/s (one thread)\n", mb,
              stats.seconds, stats.seconds > 0 ? mb / stats.seconds : 0.0);
  return 0;
}
