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
//   └── TokenFile        a validated "PFTOK" file; windows sampled
//                        deterministically
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

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Support/Hash.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

using sched::Expected;
using sched::Status;

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
};

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
