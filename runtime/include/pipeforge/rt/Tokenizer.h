//===- Tokenizer.h - A model's own tokenizer: HF BPE, SentencePiece -*- C++
//-*-===//
//
// Text to token ids with the tokenizer a model was trained with
// (docs/runtime-data.md, "Tokenizing with the model's tokenizer"); what
// `pipeforge-tokenize --tokenizer FILE` runs.
//
//   Tokenizer             encode(text) -> ids, decode(ids) -> bytes,
//   │                     vocabSize(), defaultEos()
//   ├── byte-level BPE    a Hugging Face tokenizer.json (GPT-2, Llama 3,
//   │                     DeepSeek-V3, Qwen2 ...): added tokens matched first,
//   │                     the NFC normalizer if any, the Split / ByteLevel /
//   │                     Digits pre-tokenizers (their regexes
//   │                     run by a hand-written scanner, Unicode tables from
//   │                     scripts/gen-unicode-tables.py), the BPE model
//   │                     (merges by rank), the post-processor's template,
//   │                     the ByteLevel decoder; ids equal to the
//   │                     `tokenizers` package's encode(text).ids
//   └── SentencePiece     a tokenizer.model (Llama 2, Mistral) through
//                         libsentencepiece when the build found it
//
// Anything a file uses that this code does not implement (a normalizer
// other than NFC, a pre-tokenizer or a regex construct outside the
// supported set, a model other than BPE) is an error naming the file,
// never a silent difference.
//
// A Tokenizer object keeps scratch buffers and a cache: one thread at a
// time may use it.
//
// Plain C++ (no MLIR/LLVM), no exceptions: Status / Expected.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_TOKENIZER_H
#define PIPEFORGE_RT_TOKENIZER_H

#include "pipeforge/rt/Data.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipeforge::rt {

class Tokenizer {
public:
  virtual ~Tokenizer();

  /// Appends the ids of `text` (UTF-8) to `out`, as the reference library
  /// encodes one text: tokenizers' encode(text).ids (post-processor
  /// included: a template's BOS, for example), SentencePiece's Encode. No
  /// EOS is added here (see tokenizeDocuments). Errors: invalid UTF-8 (the
  /// byte offset in the message).
  virtual Status encode(std::string_view text,
                        std::vector<uint32_t> &out) const = 0;
  /// The bytes the ids stand for, every token included (special tokens
  /// as their text): tokenizers' decode(ids, skip_special_tokens=False)
  /// before its UTF-8 check, SentencePiece's Decode. Errors: an id out of
  /// range, a decoder this code does not implement.
  virtual Expected<std::string>
  decode(const std::vector<uint32_t> &ids) const = 0;
  /// The pre-tokenized pieces of `text` as bytes (BPE only; for tests and
  /// `pipeforge-tokenize --pieces`): added tokens are pieces of their own.
  virtual Expected<std::vector<std::string>>
  pieces(std::string_view text) const;

  /// Every id is < vocabSize(): the model's vocab and the added tokens.
  virtual uint64_t vocabSize() const = 0;
  /// The id of a token's text (added tokens and the model's vocab), if any.
  virtual std::optional<uint32_t> tokenId(const std::string &token) const = 0;
  /// The end-of-document token the file names (tokenizer_config.json
  /// beside a tokenizer.json, the post-processor's template, a known EOS
  /// added token; a SentencePiece model's eos_id), or none.
  virtual std::optional<uint32_t> defaultEos() const = 0;
  /// One line: the kind, the file, the vocab.
  virtual std::string describe() const = 0;
};

/// Loads `path`: a tokenizer.json (Hugging Face), a SentencePiece
/// tokenizer.model (any file that is not JSON), or a model's folder: its
/// tokenizer.json, or its tokenizer.model when the tokenizer.json cannot be
/// used (Llama 2's is a SentencePiece conversion). Every error names the
/// file.
Expected<std::unique_ptr<Tokenizer>> loadTokenizer(const std::string &path);
/// A tokenizer.json from memory; `name` is used in messages, `configJson`
/// is the text of a tokenizer_config.json (may be empty).
Expected<std::unique_ptr<Tokenizer>>
tokenizerFromJson(std::string_view json, const std::string &name,
                  std::string_view configJson = {});
/// Whether this build can read SentencePiece models (libsentencepiece).
bool sentencePieceAvailable();

/// The pieces of `text` under one pre-tokenizer regex of a tokenizer.json
/// (a Split pattern, ByteLevel's GPT-2 pattern): matches and the text
/// between them, in order (tokenizers' Split with behavior "Isolated").
/// Errors: a construct outside the scanner's subset (the message names it).
Expected<std::vector<std::string>> splitByPattern(const std::string &pattern,
                                                  std::string_view text);

//===----------------------------------------------------------------------===//
// Documents to a token file
//===----------------------------------------------------------------------===//

struct TokenizeOptions {
  /// Each input file is one document unless a separator is given: then
  /// each file is split at every occurrence of it (the separator dropped,
  /// empty documents skipped).
  std::optional<std::string> docSeparator;
  /// The id appended to every document: unset = the tokenizer's
  /// defaultEos() (an error if it has none); -1 = none.
  std::optional<int64_t> eos;
  /// Token width in the file: 0 = 2 when vocab <= 65536, else 4.
  uint32_t width = 0;
};

struct TokenizeStats {
  uint64_t documents = 0, tokens = 0, bytes = 0;
  double seconds = 0;          ///< encoding only (not reading or writing)
  std::optional<uint32_t> eos; ///< the id appended, if any
  uint32_t width = 0;          ///< the width written
};

/// Tokenizes the documents of `inputs` (in order) into the token file
/// `output` (vocab = tok.vocabSize()). A document's ids are encode(doc)
/// followed by the EOS unless encode already ended with it.
Status tokenizeDocuments(const Tokenizer &tok,
                         const std::vector<std::string> &inputs,
                         const std::string &output, const TokenizeOptions &opts,
                         TokenizeStats *stats = nullptr);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_TOKENIZER_H
