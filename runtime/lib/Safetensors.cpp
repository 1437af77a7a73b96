//===- Safetensors.cpp - Hugging Face safetensors files --------------------===//
//
// See Safetensors.h and docs/huggingface.md.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Safetensors.h"

#include "pipeforge/rt/Data.h"
#include "pipeforge/Support/Numeric.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pipeforge::rt {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char *stDTypeName(StDType t) {
  switch (t) {
  case StDType::F32:
    return "F32";
  case StDType::F16:
    return "F16";
  case StDType::BF16:
    return "BF16";
  }
  return "?";
}

int stDTypeSize(StDType t) { return t == StDType::F32 ? 4 : 2; }

int64_t StTensorInfo::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d; // validated on load: no overflow
  return n;
}

namespace {

/// IEEE half to float (exact).
float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = v << 8 | p[i];
  return v;
}

} // namespace

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::open(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::error("'" + path + "': cannot open: " +
                         std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return Status::error("'" + path + "': not a regular file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("'" + path + "': cannot open: " +
                         std::strerror(errno));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile);
  f->name = path;
  f->size = size_t(st.st_size);
  if (f->size > 0) {
    void *m = ::mmap(nullptr, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return Status::error("'" + path + "': cannot map: " + std::strerror(e));
    }
    f->base = static_cast<const uint8_t *>(m);
    f->mapped = true;
  }
  ::close(fd);
  if (Status s = f->parse(); !s)
    return s;
  return f;
}

Expected<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::fromBytes(const std::vector<uint8_t> &bytes,
                           const std::string &name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile);
  f->name = name;
  f->owned = bytes;
  f->base = f->owned.data();
  f->size = f->owned.size();
  if (Status s = f->parse(); !s)
    return s;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped)
    ::munmap(const_cast<uint8_t *>(base), size);
}

Status SafetensorsFile::parse() {
  auto bad = [&](const std::string &m) {
    return Status::error("'" + name + "': " + m);
  };
  if (size < 8)
    return bad("not a safetensors file (" + std::to_string(size) +
               " bytes, shorter than the 8-byte header length)");
  uint64_t n = le64(base);
  if (n > size - 8)
    return bad("header length " + std::to_string(n) + " runs past the end of "
               "the file (" + std::to_string(size) + " bytes)");
  data = base + 8 + n;
  uint64_t dataBytes = size - 8 - n;
  Json h = Json::parse(base + 8, base + 8 + n, nullptr,
                       /*allow_exceptions=*/false);
  if (!h.is_object())
    return bad("the header is not a JSON object");
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string &key = it.key();
    const Json &v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object())
        return bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return bad("__metadata__ entry '" + m.key() + "' is not a string");
        meta[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    std::string where = "tensor '" + key + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      return bad(where + "expected {\"dtype\", \"shape\", \"data_offsets\"}");
    StTensorInfo t;
    t.name = key;
    const Json &dt = v["dtype"];
    std::string d = dt.is_string() ? dt.get<std::string>() : "";
    if (d == "F32")
      t.dtype = StDType::F32;
    else if (d == "F16")
      t.dtype = StDType::F16;
    else if (d == "BF16")
      t.dtype = StDType::BF16;
    else
      return bad(where + "dtype " + (dt.is_string() ? "'" + d + "'" : dt.dump()) +
                 " is not one of F32, F16, BF16");
    if (!v["shape"].is_array())
      return bad(where + "shape is not an array");
    int64_t count = 1;
    for (const Json &x : v["shape"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        return bad(where + "shape " + v["shape"].dump() +
                   " has a dimension that is not a non-negative integer");
      auto p = checkedMul(count, x.get<int64_t>());
      if (!p || *p > kMaxTensorBytes)
        return bad(where + "shape " + v["shape"].dump() + " is too large");
      count = *p;
      t.shape.push_back(x.get<int64_t>());
    }
    const Json &o = v["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() ||
        !o[1].is_number_unsigned())
      return bad(where + "data_offsets is not [begin, end]");
    t.begin = o[0].get<uint64_t>();
    t.end = o[1].get<uint64_t>();
    if (t.begin > t.end || t.end > dataBytes)
      return bad(where + "data_offsets [" + std::to_string(t.begin) + ", " +
                 std::to_string(t.end) + "] run past the data (" +
                 std::to_string(dataBytes) + " bytes)");
    if (t.end - t.begin != uint64_t(count) * uint64_t(stDTypeSize(t.dtype)))
      return bad(where + std::to_string(t.end - t.begin) + " bytes for " +
                 std::to_string(count) + " " + stDTypeName(t.dtype) +
                 " elements");
    byName[key] = infos.size();
    infos.push_back(std::move(t));
  }
  // No two tensors share bytes.
  std::vector<const StTensorInfo *> order;
  for (const StTensorInfo &t : infos)
    if (t.end > t.begin)
      order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](auto *a, auto *b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      return bad("tensors '" + order[i - 1]->name + "' and '" +
                 order[i]->name + "' overlap");
  return Status::ok();
}

const StTensorInfo *SafetensorsFile::find(const std::string &tensor) const {
  auto it = byName.find(tensor);
  return it == byName.end() ? nullptr : &infos[it->second];
}

Status SafetensorsFile::read(const StTensorInfo &t, int64_t first,
                             int64_t count, float *out) const {
  int64_t n = t.numElements();
  if (first < 0 || count < 0 || first > n || count > n - first)
    return Status::error("'" + name + "': tensor '" + t.name +
                         "': elements [" + std::to_string(first) + ", " +
                         std::to_string(first + count) + ") outside its " +
                         std::to_string(n));
  const uint8_t *p = data + t.begin + uint64_t(first) * stDTypeSize(t.dtype);
  switch (t.dtype) {
  case StDType::F32:
    std::memcpy(out, p, size_t(count) * 4);
    break;
  case StDType::F16:
  case StDType::BF16:
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h = uint16_t(p[2 * i] | p[2 * i + 1] << 8);
      out[i] = t.dtype == StDType::F16 ? halfToFloat(h) : bf16ToFloat(h);
    }
    break;
  }
  return Status::ok();
}

void SafetensorsFile::release(const StTensorInfo &t) const {
  if (!mapped)
    return;
  uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  uintptr_t lo = uintptr_t(data + t.begin), hi = uintptr_t(data + t.end);
  lo = (lo + page - 1) / page * page;
  hi = hi / page * page;
  if (hi > lo)
    ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
}

//===----------------------------------------------------------------------===//
// Model directories
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<SafetensorsModel>>
SafetensorsModel::open(const std::string &dir) {
  auto m = std::make_unique<SafetensorsModel>();
  m->root = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::error("'" + dir + "': not a directory (a Hugging Face "
                         "model directory holds config.json and "
                         "model.safetensors)");
  std::string single = dir + "/model.safetensors";
  std::string index = dir + "/model.safetensors.index.json";
  auto add = [&](std::unique_ptr<SafetensorsFile> f) {
    for (const StTensorInfo &t : f->tensors())
      m->where[t.name] = {f.get(), &t};
    m->files.push_back(std::move(f));
  };
  if (fs::exists(index, ec)) {
    auto bytes = readFileBytes(index);
    if (!bytes)
      return bytes.status();
    Json j = Json::parse(bytes->begin(), bytes->end(), nullptr, false);
    if (!j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object())
      return Status::error("'" + index +
                           "': expected a JSON object with a \"weight_map\"");
    std::map<std::string, std::vector<std::string>> byFile;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return Status::error("'" + index + "': weight_map entry '" + it.key() +
                             "' is not a file name");
      std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos ||
          file == "." || file == "..")
        return Status::error("'" + index + "': weight_map entry '" +
                             it.key() + "' names '" + file +
                             "', not a file of the directory");
      byFile[file].push_back(it.key());
    }
    for (auto &[file, tensors] : byFile) {
      std::string path = dir + "/" + file;
      if (!fs::exists(path, ec))
        return Status::error("'" + index + "' names the shard '" + file +
                             "' (tensor '" + tensors.front() +
                             "'), which does not exist");
      auto f = SafetensorsFile::open(path);
      if (!f)
        return f.status();
      for (const std::string &t : tensors)
        if (!(*f)->find(t))
          return Status::error("'" + index + "' puts tensor '" + t +
                               "' in '" + file + "', which does not hold it");
      add(f.take());
    }
    // Tensors of a shard that the index does not name are not the model's.
    for (auto it = m->where.begin(); it != m->where.end();)
      if (!j["weight_map"].contains(it->first))
        it = m->where.erase(it);
      else
        ++it;
  } else if (fs::exists(single, ec)) {
    auto f = SafetensorsFile::open(single);
    if (!f)
      return f.status();
    add(f.take());
  } else {
    return Status::error("'" + dir + "': neither model.safetensors nor "
                         "model.safetensors.index.json");
  }
  return m;
}

SafetensorsModel::Found SafetensorsModel::find(const std::string &t) const {
  auto it = where.find(t);
  return it == where.end() ? Found{} : it->second;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (auto &[n, f] : where)
    out.push_back(n);
  return out;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// The header of a file holding `order` (sorted by name) as F32, padded
/// with spaces to a multiple of 8 bytes, and the data's size.
std::string encodeHeader(const std::vector<const StTensorOut *> &order,
                         const std::map<std::string, std::string> &metadata,
                         uint64_t &dataBytes) {
  Json h = Json::object();
  if (!metadata.empty())
    h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const StTensorOut *t : order) {
    uint64_t n = 1;
    for (int64_t d : t->shape)
      n *= uint64_t(d);
    h[t->name] = {{"dtype", "F32"},
                  {"shape", t->shape},
                  {"data_offsets", {off, off + 4 * n}}};
    off += 4 * n;
  }
  dataBytes = off;
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

std::vector<const StTensorOut *> byName(const std::vector<StTensorOut> &ts) {
  std::vector<const StTensorOut *> order;
  for (const StTensorOut &t : ts)
    order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](auto *a, auto *b) { return a->name < b->name; });
  return order;
}

size_t elementsOf(const StTensorOut &t) {
  size_t n = 1;
  for (int64_t d : t.shape)
    n *= size_t(d);
  return n;
}

/// Writes one file tensor by tensor (no image of the whole file in
/// memory: an export holds the model once), through PATH.tmp and a rename.
Status writeSafetensorsFile(const std::string &path,
                            const std::vector<StTensorOut> &tensors,
                            const std::map<std::string, std::string> &meta) {
  auto order = byName(tensors);
  uint64_t dataBytes = 0;
  std::string header = encodeHeader(order, meta, dataBytes);
  std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    return Status::error("cannot write '" + tmp + "': " +
                         std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const StTensorOut *t : order) {
    size_t n = elementsOf(*t);
    ok = ok && std::fwrite(t->data, 4, n, f) == n;
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error("error writing '" + path + "': " +
                         std::strerror(errno));
  }
  return Status::ok();
}

} // namespace

std::vector<uint8_t>
encodeSafetensors(const std::vector<StTensorOut> &tensors,
                  const std::map<std::string, std::string> &metadata) {
  auto order = byName(tensors);
  uint64_t dataBytes = 0;
  std::string header = encodeHeader(order, metadata, dataBytes);
  std::vector<uint8_t> out(8 + header.size() + dataBytes);
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i)
    out[size_t(i)] = uint8_t(len >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  uint8_t *p = out.data() + 8 + header.size();
  for (const StTensorOut *t : order) {
    size_t n = elementsOf(*t);
    std::memcpy(p, t->data, n * 4);
    p += n * 4;
  }
  return out;
}

Status writeSafetensorsModel(const std::string &dir,
                             const std::vector<StTensorOut> &tensors,
                             uint64_t maxShardBytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create '" + dir + "': " + ec.message());
  // Shards in name order, each filled up to maxShardBytes.
  auto order = byName(tensors);
  std::vector<std::vector<StTensorOut>> shards(1);
  uint64_t inShard = 0, total = 0;
  for (const StTensorOut *t : order) {
    uint64_t bytes = 4;
    for (int64_t d : t->shape)
      bytes *= uint64_t(d);
    if (!shards.back().empty() && inShard + bytes > maxShardBytes) {
      shards.emplace_back();
      inShard = 0;
    }
    shards.back().push_back(*t);
    inShard += bytes;
    total += bytes;
  }
  std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    // The single-file layout; a stale index from an earlier export would
    // shadow it.
    fs::remove(dir + "/model.safetensors.index.json", ec);
    return writeSafetensorsFile(dir + "/model.safetensors", shards[0], meta);
  }
  Json index = {{"metadata", {{"total_size", total}}},
                {"weight_map", Json::object()}};
  char name[64];
  for (size_t k = 0; k < shards.size(); ++k) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1,
                  shards.size());
    if (Status s = writeSafetensorsFile(dir + "/" + name, shards[k], meta);
        !s)
      return s;
    for (const StTensorOut &t : shards[k])
      index["weight_map"][t.name] = name;
  }
  fs::remove(dir + "/model.safetensors", ec);
  std::string text = index.dump(2) + "\n";
  return writeFileAtomically(dir + "/model.safetensors.index.json",
                             std::vector<uint8_t>(text.begin(), text.end()));
}

} // namespace pipeforge::rt
