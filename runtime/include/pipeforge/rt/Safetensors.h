//===- Safetensors.h - Hugging Face safetensors files, read and written ---===//
//
// The tensor file format of the Hugging Face ecosystem (docs/huggingface.md):
//
//   offset  size  field
//   0       8     u64 little-endian N: the header's length
//   8       N     a JSON object: per tensor {"dtype", "shape",
//                 "data_offsets": [begin, end]} (offsets into the data,
//                 relative to 8 + N), and optionally "__metadata__" (a
//                 string-to-string map)
//   8 + N   ...   the data: each tensor's bytes, row-major, little-endian
//
// A reader maps the file and validates the header before anything is read:
// the length within the file, a JSON object, every dtype known, every shape
// non-negative with a product that does not overflow, every tensor's byte
// range inside the data and of exactly its size, no two ranges overlapping.
// Values are read as float32 (from F32, F16 or BF16, exactly: both convert
// to float32 without rounding), row by row, so a rank reads only the rows
// it owns from the mapped pages.
//
// A model directory (SafetensorsModel) is `model.safetensors`, or the shards
// a `model.safetensors.index.json` names ({"weight_map": {tensor: file}}),
// each opened when first needed.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_SAFETENSORS_H
#define PIPEFORGE_RT_SAFETENSORS_H

#include "pipeforge/rt/Program.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

enum class StDType : uint8_t { F32, F16, BF16 };
const char *stDTypeName(StDType t); ///< "F32", "F16", "BF16"
int stDTypeSize(StDType t);

/// One tensor of a safetensors file, as its header describes it.
struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; ///< byte range within the data section
  int64_t numElements() const;
};

/// A validated, memory-mapped safetensors file.
class SafetensorsFile {
public:
  /// Maps and validates `path`. Errors name the file and what is wrong.
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string &path);
  /// Validates an in-memory image (`name` in messages): the fuzz target's
  /// and the tests' entry. The bytes are copied.
  static Expected<std::unique_ptr<SafetensorsFile>>
  fromBytes(const std::vector<uint8_t> &bytes, const std::string &name);
  ~SafetensorsFile();

  const std::string &path() const { return name; }
  /// By name; null when absent.
  const StTensorInfo *find(const std::string &tensor) const;
  const std::vector<StTensorInfo> &tensors() const { return infos; }
  const std::map<std::string, std::string> &metadata() const { return meta; }

  /// Elements [first, first + count) of the tensor (row-major order), as
  /// float32, into `out`. Errors: a range outside the tensor.
  Status read(const StTensorInfo &t, int64_t first, int64_t count,
              float *out) const;
  /// Drops the mapped pages that lie wholly inside the tensor's bytes from
  /// this process (the file's pages stay in the page cache): a rank that
  /// has copied a tensor out does not keep it resident twice.
  void release(const StTensorInfo &t) const;

private:
  SafetensorsFile() = default;
  Status parse();
  std::string name;
  const uint8_t *base = nullptr; ///< the mapping (or `owned`)
  size_t size = 0;
  bool mapped = false;
  std::vector<uint8_t> owned;
  const uint8_t *data = nullptr; ///< base + 8 + N
  std::vector<StTensorInfo> infos;
  std::map<std::string, size_t> byName;
  std::map<std::string, std::string> meta;
};

/// A Hugging Face model directory's weights: model.safetensors or the
/// shards of model.safetensors.index.json. Opening reads only the index and
/// the shards' headers (every shard is validated, and every tensor the
/// index names must be in the shard it names: an index naming a missing
/// shard or tensor is an error).
class SafetensorsModel {
public:
  static Expected<std::unique_ptr<SafetensorsModel>>
  open(const std::string &dir);

  const std::string &dir() const { return root; }
  struct Found {
    const SafetensorsFile *file = nullptr;
    const StTensorInfo *info = nullptr;
  };
  /// The tensor and its file; file null when absent.
  Found find(const std::string &tensor) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;

private:
  std::string root;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, Found> where;
};

/// A tensor to write: its name, shape and float32 values.
struct StTensorOut {
  std::string name;
  std::vector<int64_t> shape;
  const float *data = nullptr;
};

/// The image of one safetensors file holding `tensors` as F32 (header keys
/// sorted, the header padded with spaces to a multiple of 8 bytes, as the
/// reference writer does), with `metadata` as "__metadata__".
std::vector<uint8_t>
encodeSafetensors(const std::vector<StTensorOut> &tensors,
                  const std::map<std::string, std::string> &metadata = {});

/// Writes a model directory's weights: one `model.safetensors` when every
/// tensor fits in `maxShardBytes`, else shards
/// `model-0000K-of-0000N.safetensors` (each at most `maxShardBytes` unless
/// one tensor alone is bigger) and `model.safetensors.index.json`
/// ({"metadata": {"total_size"}, "weight_map"}), each file written
/// atomically. Creates `dir`.
Status writeSafetensorsModel(const std::string &dir,
                             const std::vector<StTensorOut> &tensors,
                             uint64_t maxShardBytes = uint64_t(5) << 30);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_SAFETENSORS_H
