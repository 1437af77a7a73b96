//===- TokenizerSentencePiece.cpp - tokenizer.model through libsentencepiece
//===//
//
// A SentencePiece model (Llama 2, Mistral) encoded and decoded by the
// library itself (Debian's libsentencepiece-dev). Built with it when CMake
// found it (runtime/CMakeLists.txt defines PIPEFORGE_HAVE_SENTENCEPIECE for
// this file); otherwise loading a model is an error that says so.
//
//===----------------------------------------------------------------------===//

#include "TokenizerDetail.h"

#ifdef PIPEFORGE_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace pipeforge::rt::tok {

Expected<std::unique_ptr<Tokenizer>>
loadSentencePiece(const std::string &path, const std::vector<uint8_t> &bytes);

#ifdef PIPEFORGE_HAVE_SENTENCEPIECE

namespace {

class SentencePieceTokenizer final : public Tokenizer {
public:
  Status load(const std::string &path, const std::vector<uint8_t> &bytes) {
    file = path;
    auto st = sp.LoadFromSerializedProto(std::string_view(
        reinterpret_cast<const char *>(bytes.data()), bytes.size()));
    if (!st.ok())
      return Status::error("tokenizer '" + path +
                           "': not a SentencePiece model (" +
                           std::string(st.ToString()) + ")");
    if (sp.GetPieceSize() <= 0)
      return Status::error("tokenizer '" + path + "': empty vocab");
    return Status::ok();
  }
  Status encode(std::string_view text,
                std::vector<uint32_t> &out) const override {
    size_t bad = findInvalidUtf8(text);
    if (bad != std::string_view::npos)
      return Status::error("invalid UTF-8 at byte " + std::to_string(bad));
    std::vector<int> ids;
    auto st = sp.Encode(text, &ids);
    if (!st.ok())
      return Status::error("SentencePiece: " + std::string(st.ToString()));
    out.insert(out.end(), ids.begin(), ids.end());
    return Status::ok();
  }
  Expected<std::string>
  decode(const std::vector<uint32_t> &ids) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (uint32_t id : ids) {
      if (id >= vocabSize())
        return Status::error("tokenizer '" + file + "': id " +
                             std::to_string(id) + " is out of range (vocab " +
                             std::to_string(vocabSize()) + ")");
      v.push_back(int(id));
    }
    std::string out;
    auto st = sp.Decode(v, &out);
    if (!st.ok())
      return Status::error("SentencePiece: " + std::string(st.ToString()));
    return out;
  }
  uint64_t vocabSize() const override { return uint64_t(sp.GetPieceSize()); }
  std::optional<uint32_t> tokenId(const std::string &token) const override {
    int id = sp.PieceToId(token);
    if (id < 0 || (id == sp.unk_id() && token != sp.IdToPiece(id)))
      return std::nullopt;
    return uint32_t(id);
  }
  std::optional<uint32_t> defaultEos() const override {
    if (sp.eos_id() < 0)
      return std::nullopt;
    return uint32_t(sp.eos_id());
  }
  std::string describe() const override {
    return "SentencePiece, vocab " + std::to_string(vocabSize());
  }

private:
  std::string file;
  sentencepiece::SentencePieceProcessor sp;
};

} // namespace

bool sentencePieceBuilt() { return true; }

Expected<std::unique_ptr<Tokenizer>>
loadSentencePiece(const std::string &path, const std::vector<uint8_t> &bytes) {
  auto t = std::make_unique<SentencePieceTokenizer>();
  Status st = t->load(path, bytes);
  if (!st)
    return st;
  return std::unique_ptr<Tokenizer>(std::move(t));
}

#else // !PIPEFORGE_HAVE_SENTENCEPIECE

bool sentencePieceBuilt() { return false; }

Expected<std::unique_ptr<Tokenizer>>
loadSentencePiece(const std::string &path, const std::vector<uint8_t> &) {
  return Status::error(
      "tokenizer '" + path +
      "': not a tokenizer.json, so taken as a SentencePiece model, but this "
      "build has no SentencePiece support (install libsentencepiece-dev, "
      "e.g. with scripts/setup.sh, and rerun CMake)");
}

#endif

} // namespace pipeforge::rt::tok
