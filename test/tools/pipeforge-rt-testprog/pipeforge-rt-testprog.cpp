//===- pipeforge-rt-testprog.cpp - Hand-built programs for runtime tests --===//
//
// Writes the hand-built residual MLP of MlpProgram.h as a program file,
// and edits program files for tests:
//
//   pipeforge-rt-testprog --add-components IN.pfp -o OUT.pfp  (see
//       addComponents: components for the fused-overlap executor tests)
//   pipeforge-rt-testprog --schedule 1f1b|zb-h1|...|none --ranks R
//       [--stages S] [--microbatches M] [--dp D] -o prog.pfp
//   pipeforge-rt-testprog --patch IN.pfp -o OUT.pfp POINTER=JSON...
//       (see patchMain: edits the JSON body of a program file without
//       validating it, for tests of what the validator refuses)
//
//===----------------------------------------------------------------------===//

#include "MlpProgram.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace pipeforge;
using namespace pipeforge::rt;

namespace {

[[noreturn]] void die(const std::string &m) {
  std::fprintf(stderr, "pipeforge-rt-testprog: %s\n", m.c_str());
  std::exit(1);
}

} // namespace

/// Components for a compiled program (tests of the fused-overlap executor
/// until pipeforge-compile --pp-fuse-overlap writes them): layers at the moe
/// kernels. Forward: layer i's mlp = [the kernel before its moe, moe, the
/// residual add], attn = the kernels before; backward: mlp from the
/// moe_bwd_input (and moe_bwd_weight) through the next two kernels, attn
/// the rest. Leading / trailing kernels join the first / last component.
void addComponents(Function &fn, bool forward) {
  std::vector<int32_t> moes;
  for (size_t k = 0; k < fn.kernels.size(); ++k)
    if (fn.kernels[k].op == (forward ? "moe" : "moe_bwd_input"))
      moes.push_back(int32_t(k));
  const int32_t nk = int32_t(fn.kernels.size());
  fn.components.clear();
  if (nk == 0)
    return;
  if (moes.empty()) {
    fn.components.push_back({"attn", 0, 0, nk});
    return;
  }
  const int32_t L = int32_t(moes.size());
  int32_t at = 0;
  for (int32_t i = 0; i < L; ++i) {
    int32_t m = moes[size_t(i)];
    int32_t nextM = i + 1 < L ? moes[size_t(i) + 1] : nk;
    int32_t layer = forward ? i : L - 1 - i;
    if (forward) {
      int32_t b = std::max(at, m - 1), e = std::min(nextM, m + 2);
      if (b > at)
        fn.components.push_back({"attn", layer, at, b});
      fn.components.push_back({"mlp", layer, at > b ? at : b, e});
      at = e;
    } else {
      int32_t e = m + 1;
      if (e < nk && fn.kernels[size_t(e)].op == "moe_bwd_weight")
        ++e;
      e = std::min(nextM, e + 2);
      fn.components.push_back({"mlp", layer, at, e});
      if (nextM > e)
        fn.components.push_back({"attn", layer, e, nextM});
      at = nextM;
    }
  }
  if (at < nk)
    fn.components.back().end = nk;
}

int addComponentsMain(const std::string &in, const std::string &out) {
  auto p = readProgram(in);
  if (!p)
    die(p.status().message());
  for (Stage &st : p->stages) {
    addComponents(st.forward, true);
    addComponents(st.backwardInput, false);
    addComponents(st.backward, false);
  }
  if (Status s = writeProgram(*p, out); !s)
    die(s.message());
  return 0;
}

/// Writes a copy of program file `in` with edits to its JSON body (header
/// and checksum recomputed, nothing validated): each edit is
/// `POINTER=JSON`, an RFC 6901 JSON pointer into the body (docs/
/// program-format.md) and the JSON value to put there, e.g.
///   /stages/1/forward/kernels/3/op="linear"
///   /stages/1/forward/kernels/3/inputs=[12,7]
/// The way for tests to build programs that pipeforge-compile never writes
/// (what the validator must refuse) without patching bytes.
int patchMain(const std::string &in, const std::string &out,
              const std::vector<std::string> &edits) {
  std::ifstream is(in, std::ios::binary);
  std::stringstream ss;
  ss << is.rdbuf();
  std::string bytes = ss.str();
  if (!is || bytes.size() < kProgramHeaderSize ||
      bytes.compare(0, 8, std::string(kProgramMagic, 8)) != 0)
    die("'" + in + "' is not a program file");
  nlohmann::json body = nlohmann::json::parse(
      bytes.substr(kProgramHeaderSize), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    die("'" + in + "': the body is not valid JSON");
  for (const std::string &e : edits) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || e.empty() || e[0] != '/')
      die("edit '" + e + "' is not POINTER=JSON");
    nlohmann::json v = nlohmann::json::parse(e.substr(eq + 1), nullptr, false);
    if (v.is_discarded())
      die("edit '" + e + "': the value is not valid JSON");
    try {
      body[nlohmann::json::json_pointer(e.substr(0, eq))] = std::move(v);
    } catch (const nlohmann::json::exception &x) {
      die("edit '" + e + "': " + x.what());
    }
  }
  std::string text = body.dump(1) + "\n";
  std::string file = bytes.substr(0, 16); // magic, version, flags
  auto putU64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i)
      file.push_back(char((v >> (8 * i)) & 0xff));
  };
  putU64(text.size());
  putU64(programChecksum(text));
  file += text;
  std::ofstream os(out, std::ios::binary | std::ios::trunc);
  os.write(file.data(), std::streamsize(file.size()));
  if (!os)
    die("cannot write '" + out + "'");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && std::string(argv[1]) == "--add-components" &&
      std::string(argv[3]) == "-o")
    return addComponentsMain(argv[2], argv[4]);
  if (argc >= 5 && std::string(argv[1]) == "--patch" &&
      std::string(argv[3]) == "-o")
    return patchMain(argv[2], argv[4],
                     std::vector<std::string>(argv + 5, argv + argc));
  std::string kind = "1f1b", out;
  int ranks = 2, stages = -1, mb = 4, dp = 1;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc)
        die("option " + o + " needs a value");
      return argv[++i];
    };
    if (o == "--schedule")
      kind = val();
    else if (o == "--ranks")
      ranks = std::atoi(val().c_str());
    else if (o == "--stages")
      stages = std::atoi(val().c_str());
    else if (o == "--microbatches")
      mb = std::atoi(val().c_str());
    else if (o == "--dp")
      dp = std::atoi(val().c_str());
    else if (o == "-o")
      out = val();
    else
      die("unknown option '" + o + "'");
  }
  if (out.empty())
    die("no -o");
  auto p = testing::buildMlpProgram(kind, ranks, stages, mb, dp);
  if (!p)
    die(p.message());
  if (Status s = writeProgram(*p, out); !s)
    die(s.message());
  return 0;
}
