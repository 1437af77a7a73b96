//===- Tokenizer.cpp - Loading a tokenizer; documents to a token file -----===//
//
// loadTokenizer tells a tokenizer.json from a SentencePiece model by its
// contents; tokenizeDocuments is what `pipeforge-tokenize --tokenizer`
// runs (docs/runtime-data.md, "Tokenizing with the model's tokenizer").
//
//===----------------------------------------------------------------------===//

#include "TokenizerDetail.h"

#include <cctype>
#include <chrono>
#include <sys/stat.h>

namespace pipeforge::rt {

namespace tok {
Expected<std::unique_ptr<Tokenizer>>
loadHfTokenizer(std::string_view json, const std::string &name,
                std::string_view configJson);
Expected<std::unique_ptr<Tokenizer>>
loadSentencePiece(const std::string &path, const std::vector<uint8_t> &bytes);
bool sentencePieceBuilt();
} // namespace tok

Tokenizer::~Tokenizer() = default;

Expected<std::vector<std::string>> Tokenizer::pieces(std::string_view) const {
  return Status::error("pre-tokenized pieces are only defined for a "
                       "tokenizer.json (" +
                       describe() + ")");
}

bool sentencePieceAvailable() { return tok::sentencePieceBuilt(); }

namespace {

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}
std::string dirName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

Expected<std::unique_ptr<Tokenizer>>
tokenizerFromJson(std::string_view json, const std::string &name,
                  std::string_view configJson) {
  return tok::loadHfTokenizer(json, name, configJson);
}

namespace {

Expected<std::unique_ptr<Tokenizer>> loadFile(const std::string &file) {
  auto bytes = readFileBytes(file);
  if (!bytes)
    return Status::error("tokenizer: " + bytes.message());
  if (bytes->empty())
    return Status::error("tokenizer '" + file + "': empty file");
  size_t i = 0;
  while (i < bytes->size() && std::isspace((*bytes)[i]))
    ++i;
  bool json = i < bytes->size() && ((*bytes)[i] == '{' || (*bytes)[i] == '[');
  if (file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0)
    json = true;
  if (!json)
    return tok::loadSentencePiece(file, *bytes);
  // tokenizer_config.json beside it names the EOS token.
  std::string config;
  std::string configPath = dirName(file) + "/tokenizer_config.json";
  if (exists(configPath)) {
    auto c = readFileBytes(configPath);
    if (c)
      config.assign(c->begin(), c->end());
  }
  return tok::loadHfTokenizer(
      std::string_view(reinterpret_cast<const char *>(bytes->data()),
                       bytes->size()),
      file, config);
}

} // namespace

Expected<std::unique_ptr<Tokenizer>> loadTokenizer(const std::string &path) {
  if (!isDirectory(path))
    return loadFile(path);
  // A model's folder: its tokenizer.json, unless that is not byte-level BPE
  // (Llama 2's and Mistral's are SentencePiece conversions) and a
  // tokenizer.model is there too.
  std::string dir = path.back() == '/' ? path : path + "/";
  bool hasJson = exists(dir + "tokenizer.json"),
       hasModel = exists(dir + "tokenizer.model");
  if (!hasJson && !hasModel)
    return Status::error("tokenizer '" + path +
                         "': a folder without tokenizer.json or "
                         "tokenizer.model");
  if (!hasJson)
    return loadFile(dir + "tokenizer.model");
  auto t = loadFile(dir + "tokenizer.json");
  if (t || !hasModel)
    return t;
  auto m = loadFile(dir + "tokenizer.model");
  if (m)
    return m;
  return Status::error(t.message() + "; and " + m.message());
}

Expected<std::vector<std::string>> splitByPattern(const std::string &pattern,
                                                  std::string_view text) {
  auto p = tok::Pattern::compile(pattern);
  if (!p)
    return p.status();
  if (tok::findInvalidUtf8(text) != std::string_view::npos)
    return Status::error("text is not valid UTF-8");
  std::vector<std::string> out;
  tok::DecodedText win;
  tok::splitText(*p, tok::SplitBehavior::Isolated, false, text, win,
                 [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

Status tokenizeDocuments(const Tokenizer &tok,
                         const std::vector<std::string> &inputs,
                         const std::string &output, const TokenizeOptions &opts,
                         TokenizeStats *stats) {
  uint64_t vocab = tok.vocabSize();
  std::optional<uint32_t> eos;
  if (opts.eos) {
    if (*opts.eos >= 0) {
      if (uint64_t(*opts.eos) >= vocab)
        return Status::error("EOS id " + std::to_string(*opts.eos) +
                             " is out of range (vocab " +
                             std::to_string(vocab) + ")");
      eos = uint32_t(*opts.eos);
    }
  } else {
    eos = tok.defaultEos();
    if (!eos)
      return Status::error("the tokenizer names no end-of-document token "
                           "(pass --eos ID, or --eos none)");
  }
  if (opts.docSeparator && opts.docSeparator->empty())
    return Status::error("the document separator is empty");

  TokenizeStats s;
  s.eos = eos;
  std::vector<uint32_t> tokens;
  double seconds = 0;
  for (const std::string &in : inputs) {
    auto text = readFileBytes(in);
    if (!text)
      return text.status();
    std::string_view all(reinterpret_cast<const char *>(text->data()),
                         text->size());
    size_t pos = 0;
    while (pos <= all.size()) {
      size_t end = all.size();
      if (opts.docSeparator) {
        size_t f = all.find(*opts.docSeparator, pos);
        if (f != std::string_view::npos)
          end = f;
      }
      std::string_view doc = all.substr(pos, end - pos);
      if (!doc.empty()) {
        auto t0 = std::chrono::steady_clock::now();
        size_t before = tokens.size();
        Status st = tok.encode(doc, tokens);
        seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count();
        if (!st)
          return Status::error("'" + in + "', document " +
                               std::to_string(s.documents + 1) + " (at byte " +
                               std::to_string(pos) + "): " + st.message());
        if (eos && (tokens.size() == before || tokens.back() != *eos))
          tokens.push_back(*eos);
        ++s.documents;
        s.bytes += doc.size();
      }
      if (end == all.size())
        break;
      pos = end + opts.docSeparator->size();
    }
  }
  s.tokens = tokens.size();
  s.seconds = seconds;
  s.width = opts.width ? opts.width : (vocab <= 65536 ? 2 : 4);
  Status st = writeTokenFile(output, tokens, vocab, opts.width);
  if (!st)
    return st;
  if (stats)
    *stats = s;
  return Status::ok();
}

} // namespace pipeforge::rt
