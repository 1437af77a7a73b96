//===- Data.h - Training data: synthetic language, token files --*- C++ -*-===//
//
// Where a training run's tokens come from (docs/runtime-data.md).
//
//   DataSource           batch(globalMicrobatchIndex, step, b, s, tokens,
//   │                    targets): b rows of s tokens and their next tokens,
//   │                    a pure function of (source, step, microbatch, row)
//   ├── SyntheticLanguage the embedded default: a deterministic byte-level
//   │                    language with strong structure (a small grammar,
//   │                    repeated words, counting, copying) that a tiny GPT
//   │                    visibly learns in a few dozen CPU steps
//   ├── TokenFile        a validated "PFTOK" file; windows sampled
//   │                    deterministically
//   └── TokenArray       other tools' token arrays, mapped: Megatron-LM
//                        indexed datasets, NumPy .npy, nanoGPT's uint16
//                        .bin; the same windows (openDataFile picks)
//
// Rank-count independence: the sample of (step, global microbatch, row)
// never depends on who asks, so a pipelined run (any stage / dp layout) and
// the single-process reference see identical data. With data parallelism
// the global microbatch index is dpRank * microbatchesPerReplica + mb.
//
// Since batches are a pure function of the step, the data position saved in
// a checkpoint is the next step index plus a fingerprint of the source.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_DATA_H
#define PIPEFORGE_RT_DATA_H

#include "pipeforge/Support/Hash.h"
#include "pipeforge/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

using pipeforge::Expected;
using pipeforge::Status;

/// FNV-1a, 64 bit (pipeforge/Support/Hash.h): the checksum of token and
/// checkpoint files.
using pipeforge::fnv1a64;
using pipeforge::kFnv1aOffset;

/// The bytes of a regular file. Errors (never exceptions): missing or
/// unreadable, a directory, not a regular file (a device, a FIFO).
Expected<std::vector<uint8_t>> readFileBytes(const std::string &path);

/// Writes `bytes` to `path`, checking every write and the close (a full
/// device is an error, never a silent success). A regular file (or a new
/// path) is replaced atomically: written to PATH.tmp, then renamed over it.
/// Anything else (a device like /dev/full, a FIFO, a symbolic link) is
/// written through, never replaced by a rename. `tmpSuffix` names the
/// temporary (writers of the same path on one file system need their own).
Status writeFileAtomically(const std::string &path,
                           const std::vector<uint8_t> &bytes,
                           const std::string &tmpSuffix = ".tmp");

/// A stream of training samples.
class DataSource {
public:
  virtual ~DataSource();
  virtual int64_t vocabSize() const = 0;
  /// Fills tokens[b*s] and targets[b*s] (row-major [b, s]); targets are the
  /// next tokens: row r is window w of s+1 tokens, tokens = w[0..s),
  /// targets = w[1..s]. Row r of a batch does not depend on b.
  /// Errors: b or s < 1, null buffers, negative indices, a source too
  /// short for a window of s+1 tokens.
  virtual Status batch(int64_t globalMicrobatchIndex, int64_t step, int64_t b,
                       int64_t s, int32_t *tokens, int32_t *targets) const = 0;
  /// Identifies the data (kind, seed, file contents): a checkpoint records
  /// it so a resume on different data is refused.
  virtual uint64_t fingerprint() const = 0;
  virtual std::string describe() const = 0;
  /// Document boundaries inside the rows of batch() (attention within
  /// documents, `--doc-mask`): docStart[r*s + i] is the position in row r
  /// where the document holding token i starts, 0 <= docStart <= i (0 when
  /// that document began before the window). A pure function of the same
  /// arguments as batch(), so every stage computes it on its own. This
  /// default has no documents: an error (documentStartsFromEos finds them
  /// from an end-of-document token in any source).
  virtual Status documentStarts(int64_t globalMicrobatchIndex, int64_t step,
                                int64_t b, int64_t s, int32_t *docStart) const;
};

/// The document starts of rows of tokens [b, s] in which a document ends
/// with the token `eos` (Megatron-LM's EOD, GPT-2's <|endoftext|>): token
/// i starts a document when token i - 1 is `eos` (the token is the last
/// of its document). Each row's first token starts one.
void documentStartsFromEos(const int32_t *tokens, int64_t b, int64_t s,
                           int32_t eos, int32_t *docStart);

/// The embedded default dataset (vocab 256, byte-level ASCII text).
class SyntheticLanguage final : public DataSource {
public:
  static constexpr uint64_t kDefaultSeed = 0x5eed5eedull;
  explicit SyntheticLanguage(uint64_t seed = kDefaultSeed) : seed(seed) {}

  int64_t vocabSize() const override { return 256; }
  Status batch(int64_t globalMicrobatchIndex, int64_t step, int64_t b,
               int64_t s, int32_t *tokens, int32_t *targets) const override;
  uint64_t fingerprint() const override;
  std::string describe() const override;

  /// `n` tokens of the stream with key `key` (what one batch row uses).
  void generate(uint64_t key, size_t n, int32_t *out) const;
  /// A readable sample, for docs and debugging.
  std::string sampleText(uint64_t key, size_t n) const;
  uint64_t getSeed() const { return seed; }

private:
  uint64_t seed;
};

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//
//
// Little-endian binary:
//   offset  size        field
//   0       8           magic "PFTOK\0\0\0"
//   8       4  u32      version (1)
//   12      4  u32      token width in bytes: 2 or 4
//   16      8  u64      token count N
//   24      8  u64      vocab size V (every token < V, V <= 2^31 - 1)
//   32      N * width   tokens
//   32+N*w  8  u64      FNV-1a 64 of all preceding bytes (header + tokens)
// The file size must be exactly 40 + N * width.

constexpr uint32_t kTokenFileVersion = 1;

/// The file image of `tokens` (width 0: 2 when vocab <= 65536, else 4).
Expected<std::vector<uint8_t>>
encodeTokenFile(const std::vector<uint32_t> &tokens, uint64_t vocab,
                uint32_t width = 0);
/// Writes atomically (temp file, then rename).
Status writeTokenFile(const std::string &path,
                      const std::vector<uint32_t> &tokens, uint64_t vocab,
                      uint32_t width = 0);
/// Byte-level tokenization (vocab 256) of a text file into a token file:
/// what pipeforge-tokenize does. `count` receives the number of tokens.
Status tokenizeTextFile(const std::string &textPath,
                        const std::string &tokenPath, uint32_t width = 2,
                        uint64_t *count = nullptr);

class TokenFile final : public DataSource {
public:
  /// Reads and validates the whole file. `seed` picks the windows.
  static Expected<std::unique_ptr<TokenFile>> open(const std::string &path,
                                                   uint64_t seed = 0);
  /// Validates an in-memory image; `name` is used in messages.
  static Expected<std::unique_ptr<TokenFile>>
  fromBytes(std::vector<uint8_t> bytes, const std::string &name,
            uint64_t seed = 0);

  int64_t vocabSize() const override { return int64_t(vocab); }
  /// Row r samples a contiguous window at an offset hashed from
  /// (seed, step, globalMicrobatchIndex, r), uniform over the N - s
  /// possible windows.
  Status batch(int64_t globalMicrobatchIndex, int64_t step, int64_t b,
               int64_t s, int32_t *tokens, int32_t *targets) const override;
  uint64_t fingerprint() const override;
  std::string describe() const override;

  uint64_t size() const { return count; }
  uint32_t width() const { return tokWidth; }
  uint64_t checksum() const { return sum; }
  uint32_t token(uint64_t i) const;

private:
  TokenFile() = default;
  std::string name;
  std::vector<uint8_t> bytes;
  uint64_t count = 0, vocab = 0, sum = 0, seed = 0;
  uint32_t tokWidth = 2;
};

/// The window rule every file source shares (TokenFile, TokenArray): row
/// `row` of microbatch `mb` at step `step` starts at
/// hash(seed, step, mb, row) mod `windows`, with windows = N - s for N
/// tokens and sequence length s (a window is s + 1 tokens). The same tokens
/// in any format give the same batches.
uint64_t windowStart(uint64_t seed, int64_t step, int64_t mb, int64_t row,
                     uint64_t windows);

//===----------------------------------------------------------------------===//
// Other tools' token arrays (docs/runtime-data.md, "Megatron-LM, nanoGPT
// and NumPy token arrays")
//===----------------------------------------------------------------------===//

/// The integer element types of token arrays (Megatron-LM's dtype codes 1,
/// 2, 3, 4, 5, 8; NumPy's |u1 |i1 <i2 <u2 <i4 <u4 <i8 <u8).
enum class TokenDType : uint8_t { U8, I8, I16, U16, I32, U32, I64, U64 };
size_t tokenDTypeBytes(TokenDType t);
/// NumPy's name: "uint16", "int32", ...
const char *tokenDTypeName(TokenDType t);

/// The read-only bytes of a file: mapped (mmap, private, read-only) rather
/// than copied, or an in-memory image (tests, fuzzers). An empty file maps
/// to an empty span.
class FileBytes {
public:
  /// Errors: missing, unreadable, a directory, not a regular file.
  static Expected<std::shared_ptr<const FileBytes>>
  map(const std::string &path);
  static std::shared_ptr<const FileBytes> hold(std::vector<uint8_t> bytes);
  ~FileBytes();
  FileBytes(const FileBytes &) = delete;
  FileBytes &operator=(const FileBytes &) = delete;
  const uint8_t *data() const { return ptr; }
  uint64_t size() const { return len; }

private:
  FileBytes() = default;
  const uint8_t *ptr = nullptr;
  uint64_t len = 0;
  bool mapped = false;
  std::vector<uint8_t> owned;
};

/// A validated Megatron-LM index (PREFIX.idx, megatron.core.datasets.
/// indexed_dataset, little-endian):
///   0   9      magic "MMIDIDX\0\0"
///   9   8 u64  version (1)
///   17  1 u8   dtype code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16; 6 and 7
///              are floats, refused)
///   18  8 u64  sequence count S
///   26  8 u64  document index count D (documents + 1)
///   34  4 S    sequence lengths, int32, in tokens
///   ..  8 S    sequence pointers, int64, byte offsets into PREFIX.bin
///   ..  8 D    document indices, int64: 0, then the sequence index after
///              each document's last sequence, ending at S
///   ..  1 S    (optional) sequence modes, int8 (multimodal datasets)
/// Accepted as IndexedDatasetBuilder writes it: the sequences lie back to
/// back from byte 0 and end at the end of the .bin, so the dataset is one
/// token stream. The views point into the index bytes (unaligned).
struct MegatronIndex {
  TokenDType dtype = TokenDType::U16;
  uint64_t sequenceCount = 0;
  uint64_t documentIndexCount = 0; ///< D: the documents are D - 1
  uint64_t tokenCount = 0;         ///< the .bin's bytes / the dtype's width
  bool hasModes = false;
  const uint8_t *lengths = nullptr, *pointers = nullptr, *documents = nullptr;
  int32_t length(uint64_t i) const;
  int64_t pointer(uint64_t i) const;
  int64_t documentIndex(uint64_t k) const;
  /// The token offset where document k (0 <= k < D - 1) starts.
  uint64_t documentStart(uint64_t k) const;
};

/// Validates an index against a .bin of `binBytes` bytes. Messages name
/// the file (`idxName` or `binName`) and what is wrong: truncated, bad
/// magic, version, a float or unknown dtype, a negative length, pointers
/// past the end of the .bin, overlapping or with gaps, document indices
/// that do not run from 0 up to S, trailing bytes.
Expected<MegatronIndex> parseMegatronIndex(const uint8_t *idx, size_t size,
                                           uint64_t binBytes,
                                           const std::string &idxName,
                                           const std::string &binName);

struct DataFileOptions {
  uint64_t seed = 0; ///< picks the windows (windowStart)
  /// The model's vocabulary: a token id at or past it is an error naming
  /// the file and the offset. 0: no limit, vocabSize() is the largest
  /// token + 1.
  int64_t vocab = 0;
  /// A file shorter than one window of seqLen + 1 tokens is refused when
  /// it is opened (0: only batch() checks).
  int64_t seqLen = 0;
};

/// The token arrays of other tools, mapped rather than copied and read as
/// one stream of N tokens; windows follow windowStart, as TokenFile's do:
///   Megatron  a Megatron-LM indexed dataset, PREFIX.bin + PREFIX.idx
///   Npy       a NumPy .npy: 1-D, little-endian integers (np.save)
///   RawU16    nanoGPT's .bin: uint16 tokens, no header
/// Opening scans every token once (the vocabulary check) and hashes the
/// bytes (the fingerprint).
class TokenArray final : public DataSource {
public:
  enum class Format { Megatron, Npy, RawU16 };
  /// `prefix` without .bin / .idx.
  static Expected<std::unique_ptr<TokenArray>>
  openMegatron(const std::string &prefix, const DataFileOptions &o = {});
  static Expected<std::unique_ptr<TokenArray>>
  openNpy(const std::string &path, const DataFileOptions &o = {});
  static Expected<std::unique_ptr<TokenArray>>
  openRawU16(const std::string &path, const DataFileOptions &o = {});
  /// In-memory images; the names are used in messages.
  static Expected<std::unique_ptr<TokenArray>>
  megatronFromBytes(std::vector<uint8_t> idx, std::vector<uint8_t> bin,
                    const std::string &prefix, const DataFileOptions &o = {});
  static Expected<std::unique_ptr<TokenArray>>
  npyFromBytes(std::vector<uint8_t> bytes, const std::string &name,
               const DataFileOptions &o = {});
  static Expected<std::unique_ptr<TokenArray>>
  rawU16FromBytes(std::vector<uint8_t> bytes, const std::string &name,
                  const DataFileOptions &o = {});

  int64_t vocabSize() const override { return vocab; }
  Status batch(int64_t globalMicrobatchIndex, int64_t step, int64_t b,
               int64_t s, int32_t *tokens, int32_t *targets) const override;
  uint64_t fingerprint() const override;
  std::string describe() const override;

  Format format() const { return fmt; }
  TokenDType dtype() const { return type; }
  uint64_t size() const { return count; }
  /// Token i (i < size()), validated non-negative and below vocabSize().
  int64_t token(uint64_t i) const;
  /// Megatron datasets: the validated index (else null).
  const MegatronIndex *megatronIndex() const {
    return fmt == Format::Megatron ? &index : nullptr;
  }
  /// Megatron datasets: the starts of the index's documents within the
  /// windows of batch(); the other formats have none (DataSource's error).
  Status documentStarts(int64_t globalMicrobatchIndex, int64_t step, int64_t b,
                        int64_t s, int32_t *docStart) const override;

private:
  TokenArray() = default;
  /// Parses the header(s), then finish() scans the tokens.
  static Expected<std::unique_ptr<TokenArray>>
  create(Format f, std::shared_ptr<const FileBytes> data,
         std::shared_ptr<const FileBytes> idx, const std::string &name,
         const std::string &idxName, const DataFileOptions &o);
  static Expected<std::unique_ptr<TokenArray>>
  finish(std::unique_ptr<TokenArray> t, const DataFileOptions &o);
  Format fmt = Format::RawU16;
  TokenDType type = TokenDType::U16;
  std::string name; ///< the token file (Megatron: PREFIX.bin)
  std::shared_ptr<const FileBytes> file, idxFile;
  const uint8_t *base = nullptr; ///< the first token
  uint64_t count = 0, seed = 0, contentHash = 0;
  int64_t vocab = 0;
  MegatronIndex index;
};

/// What `pipeforge-run --data PATH` opens, by contents and name:
///   a PFTOK file (any name)               TokenFile
///   PREFIX.idx starting "MMIDIDX"         Megatron (with PREFIX.bin)
///   PREFIX.bin beside a PREFIX.idx        Megatron
///   PREFIX (no such file; .bin and .idx)  Megatron
///   a file starting "\x93NUMPY"           Npy
///   any other *.bin                       RawU16 (nanoGPT)
/// Anything else is an error that lists these.
Expected<std::unique_ptr<DataSource>>
openDataFile(const std::string &path, const DataFileOptions &o = {});

//===----------------------------------------------------------------------===//
// Data position (checkpoints)
//===----------------------------------------------------------------------===//

struct DataPosition {
  uint64_t nextStep = 0;    ///< the step whose batches come next
  uint64_t fingerprint = 0; ///< DataSource::fingerprint() of the source
  /// 24 bytes: magic "PFDP", u32 version 1, u64 nextStep, u64 fingerprint.
  std::vector<uint8_t> serialize() const;
  static Expected<DataPosition> parse(const std::vector<uint8_t> &bytes);
  /// Errors when `src` is not the source the position was taken on.
  Status checkSource(const DataSource &src) const;
};

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_DATA_H
