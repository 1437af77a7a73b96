//===- Checkpoint.h - Per-rank training checkpoints -------------*- C++ -*-===//
//
// A checkpoint is a directory (docs/runtime-data.md):
//
//   <dir>/rank-00000.pfckpt   one binary file per rank: its parameters by
//   <dir>/rank-00001.pfckpt   name and shape, its optimizer state (AdamW m,
//   ...                       v, t, lr), the step, the data position and
//                             opaque RNG state; FNV-1a checksum at the end
//   <dir>/manifest.txt        written last, by one rank, after every rank
//                             file is in place: the checkpoint is complete
//                             iff the manifest exists
//
// Every file is written to "<name>.tmp" and renamed into place, so a crash
// never leaves a half-written file under the final name.
//
// Protocol in a multi-rank run (the executor owns the barrier):
//   every rank:  writeRankCheckpoint(dir, captured)
//   barrier
//   rank 0:      finalizeCheckpoint(dir, numRanks)   // validates + manifest
// Resume:
//   every rank:  auto ck = loadRankCheckpoint(dir, rank);
//                restoreCheckpoint(*ck, params, &optimizer);
//
// Loading validates magic, version, sizes, the checksum, the manifest's
// record of the file, and (restore) every parameter name and shape, with
// messages that name the file and the offending item.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_CHECKPOINT_H
#define PIPEFORGE_RT_CHECKPOINT_H

#include "pipeforge/rt/Data.h"
#include "pipeforge/rt/Optimizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipeforge::rt {

constexpr uint32_t kCheckpointVersion = 1;

struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Everything one rank needs to continue bit for bit.
struct RankCheckpoint {
  uint32_t rank = 0;
  uint32_t numRanks = 1;
  uint64_t step = 0; ///< optimizer steps completed (the next step's index)
  uint64_t programFingerprint = 0; ///< caller-defined, e.g. program checksum
  std::vector<CheckpointTensor> params;
  bool hasOptimizer = false;
  AdamWState<float> optimizer;
  DataPosition data;
  std::vector<uint8_t> rngState; ///< opaque to this library
};

/// A parameter as the caller holds it.
struct ParamRef {
  std::string name;
  std::vector<int64_t> shape;
  float *data = nullptr;
};

/// "rank-00003.pfckpt".
std::string rankCheckpointFileName(uint32_t rank);

/// The binary image of one rank file, and its validating decoder (`name`
/// appears in messages).
Expected<std::vector<uint8_t>> encodeRankCheckpoint(const RankCheckpoint &c);
Expected<RankCheckpoint> decodeRankCheckpoint(const std::vector<uint8_t> &b,
                                              const std::string &name);

/// Copies parameters (and the optimizer state, when `opt` is given) into a
/// RankCheckpoint. Errors: null data, a non-positive dimension, duplicate
/// names, the optimizer pending validation.
Expected<RankCheckpoint>
captureCheckpoint(uint32_t rank, uint32_t numRanks, uint64_t step,
                  const std::vector<ParamRef> &params, const AdamW *opt,
                  const DataPosition &data, std::vector<uint8_t> rngState = {},
                  uint64_t programFingerprint = 0);

/// Copies a loaded checkpoint back: every ParamRef must match a saved
/// parameter by name and shape and every saved parameter must be claimed
/// (order does not matter); `opt`, when given, gets the optimizer state.
/// Nothing is modified unless everything matches.
Status restoreCheckpoint(const RankCheckpoint &c,
                         const std::vector<ParamRef> &params, AdamW *opt);

struct CheckpointManifest;
/// Writes <dir>/rank-NNNNN.pfckpt atomically (creates `dir`). `record`, when
/// given, receives the file's manifest line (recordOf).
Status writeRankCheckpoint(const std::string &dir, const RankCheckpoint &c,
                           std::string *record = nullptr);

struct CheckpointManifest {
  struct Entry {
    uint32_t rank = 0;
    std::string file;
    uint64_t bytes = 0;
    uint64_t checksum = 0;
  };
  uint32_t version = kCheckpointVersion;
  uint64_t step = 0;
  uint32_t numRanks = 0;
  uint64_t programFingerprint = 0;
  std::vector<Entry> files; ///< by rank
};

/// After every rank file is written: reads and validates them all (same
/// step, numRanks and program fingerprint, rank ids 0..numRanks-1), then
/// writes <dir>/manifest.txt atomically. Returns the manifest. (One file
/// system holding every rank's file; without one, assembleManifest.)
Expected<CheckpointManifest> finalizeCheckpoint(const std::string &dir,
                                                uint32_t numRanks);

/// The manifest from every rank's record (writeRankCheckpoint's, gathered
/// over the transport; any order), validated as finalizeCheckpoint does,
/// without reading any file: the way to finalize when each node holds only
/// its own ranks' files.
Expected<CheckpointManifest>
assembleManifest(const std::vector<std::string> &records, uint32_t numRanks);
/// Writes <dir>/manifest.txt atomically through <dir>/manifest.txt
/// `tmpSuffix` (each writer sharing the folder needs its own suffix).
Status writeManifest(const std::string &dir, const CheckpointManifest &m,
                     const std::string &tmpSuffix = ".tmp");
Expected<CheckpointManifest> readManifest(const std::string &dir);

/// Removes what interrupted saves left under a checkpoint root: step-N
/// folders without a manifest.txt, and *.tmp files inside complete ones.
/// Call it on one rank while no rank is saving (the trainer: rank 0, after
/// a manifest is written and on --resume). A missing root is not an error.
Status removeStaleCheckpoints(const std::string &root);

/// Reads rank `rank`'s file of a complete checkpoint and validates it
/// against the manifest (size, checksum, step, rank count).
Expected<RankCheckpoint> loadRankCheckpoint(const std::string &dir,
                                            uint32_t rank);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_CHECKPOINT_H
