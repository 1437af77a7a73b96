//===- Program.h - The compiled pipeline program ----------------*- C++ -*-===//
//
// What pipeforge-compile writes and pipeforge-run executes: everything a rank
// needs to train its part of the model, with no MLIR in sight.
//
//   Program
//   ├── model / training settings (shapes, microbatches, dp, seed, ...)
//   ├── params[]        name, shape, initialisation, owning (copy, stage)
//   ├── stages[]        per (copy, stage): rank, chunk, and four Functions:
//   │                   forward (F), backwardInput (B), backwardWeight (W),
//   │                   backward (BW, fused) — each a kernel sequence over
//   │                   values, with arguments and results bound by role and
//   │                   a liveness-based buffer assignment
//   └── schedule        the verified per-rank action lists (send/recv
//                       included), as the plain C++ schedule library has it
//
// The file is versioned and self-describing (docs/program-format.md); the
// loader validates every index and size and a checksum, and rejects a
// corrupt or truncated file with a message, never a crash.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_PROGRAM_H
#define PIPEFORGE_RT_PROGRAM_H

#include "pipeforge/rt/OpKind.h"

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Support/Numeric.h"

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace pipeforge::rt {

using sched::Expected;
using sched::Status;

enum class DType : uint8_t { F32, I32 };

struct TensorType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// The product of the dimensions. A loaded program's types are within
  /// kMaxDimension / kMaxTensorBytes (Support/Numeric.h); for anything else
  /// an overflowing or negative product saturates to INT64_MAX (never UB).
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape) {
      auto p = checkedMul(n, d);
      if (!p)
        return std::numeric_limits<int64_t>::max();
      n = *p;
    }
    return n;
  }
  int64_t numBytes() const {
    auto b = checkedMul(numElements(), 4);
    return b ? *b : std::numeric_limits<int64_t>::max();
  }
};

/// What a function argument is bound to when the executor calls it.
enum class ArgRole : uint8_t {
  Activation, ///< `index`-th activation from the previous stage (F)
  Tokens,     ///< the microbatch's input tokens [batch, seq] (F, stage 0)
  Targets,    ///< the microbatch's targets [batch, seq] (F and B, last stage)
  Param,      ///< parameter `index` (global index into Program::params)
  Stash,      ///< stash slot `index` that F of this (stage, mb) returned
  GradIn,     ///< gradient of F's `index`-th activation result (B, BW); on
              ///< the loss stage the scalar loss seed
  WStash      ///< W-stash slot `index` that B of this (stage, mb) returned
};

/// What a function result is.
enum class ResultRole : uint8_t {
  Activation, ///< `index`-th activation to the next stage (F)
  Loss,       ///< the microbatch's scalar mean loss (F, last stage)
  Stash,      ///< stash slot `index`, kept for B / W / BW
  GradOut,    ///< gradient of the `index`-th Activation argument (B, BW)
  WStash,     ///< W-stash slot `index`, kept for W (B only)
  ParamGrad   ///< gradient of parameter `index`, accumulated (W, BW)
};

struct ArgBinding {
  ArgRole role;
  int32_t index = 0;
  int32_t value = 0; ///< the value id the argument defines
};

struct ResultBinding {
  ResultRole role;
  int32_t index = 0;
  int32_t value = 0; ///< the value id returned
};

/// Attribute values of a kernel: integers, floats, strings, flags.
using AttrValue = std::variant<int64_t, double, std::string, bool>;

/// One kernel invocation: an nn op by mnemonic ("linear", "attention_bwd",
/// "cross_entropy", ...) with its attributes, reading and writing values.
struct Kernel {
  std::string op; ///< the mnemonic, as the file has it
  std::map<std::string, AttrValue> attrs;
  std::vector<int32_t> inputs;  ///< value ids (-1: an absent optional operand)
  std::vector<int32_t> outputs; ///< value ids (-1: an absent optional result)
  /// The op of `op` in the registry (rt/OpShapes.h), resolved once by
  /// validateProgram; what the runtime dispatches on. Not in the file.
  OpKind kind = OpKind::Unknown;
};

/// A run of a function's kernels that forms one component of one layer
/// (from --pp-split-components): "attn" or "mlp" (an nn.moe kernel's "mlp"
/// spans its dispatch and combine all-to-alls). Components tile the kernel
/// list in order; the executor interleaves the components of an overlapped
/// F&B pair (DeepSeek's per-layer order) when every function of both
/// members has them.
struct ComponentRange {
  std::string kind;  ///< "attn" | "mlp"
  int32_t layer = 0; ///< layer index within the stage
  int32_t begin = 0; ///< first kernel
  int32_t end = 0;   ///< one past the last kernel
};

/// A stage body in SSA form: values are numbered 0..values.size()-1; every
/// value is defined exactly once, by an argument or a kernel output, before
/// it is read. `buffer[v]` is the buffer that holds value v (values whose
/// lifetimes do not overlap share buffers); `bufferBytes[b]` its size.
struct Function {
  std::vector<TensorType> values;
  std::vector<ArgBinding> args;
  std::vector<ResultBinding> results;
  std::vector<Kernel> kernels;
  std::vector<int32_t> buffer;
  std::vector<int64_t> bufferBytes;
  std::vector<ComponentRange> components; ///< empty: not split

  bool empty() const { return kernels.empty() && args.empty(); }
};

struct Stage {
  int32_t copy = 0, index = 0, rank = 0, chunk = 0;
  Function forward, backwardInput, backwardWeight, backward;
  int32_t numStash = 0;  ///< stash slots F returns
  int32_t numWStash = 0; ///< W-stash slots B returns
};

struct Param {
  std::string name; ///< stable, unique (checkpoints use it)
  TensorType type;
  /// "normal:<std>", "zeros" or "ones"; values come from a counter-based
  /// generator seeded with (Program::seed, name), so every rank and the
  /// single-process reference initialise a parameter identically.
  std::string init;
  int32_t copy = 0, stage = 0; ///< the stage that owns it
  /// Split over the expert-parallel group along dimension 0 (the experts of
  /// an nn.moe layer: its w1, w2, w3): EP rank e holds experts
  /// [e E_l, (e+1) E_l). Set by the compiler (the lowering, from the IR's
  /// nn.moe operands) when training.expert_parallel > 1; the runtime never
  /// re-derives it. In the file: "expert_sharded": true, absent when false.
  bool expertSharded = false;
  /// Tensor parallelism (docs/tensor-parallel.md): the dimension split over
  /// the tensor-parallel group, or -1 when every rank holds the whole
  /// parameter. `type` is one rank's shard: TP rank t holds
  /// [t n, (t+1) n) of that dimension of the whole tensor (n = the shard's
  /// extent), initialised as that slice of the whole. In the file:
  /// "tp_dim", absent when -1.
  int32_t tpDim = -1;
  /// A replicated parameter whose gradient each TP rank computes from its
  /// share of the tokens (sequence parallelism): summed over the group
  /// before the step. In the file: "tp_reduce_grad": true, absent when false.
  bool tpReduceGrad = false;
  /// Tied parameters (docs/model-ir.md): the name of the parameter of the
  /// same model copy this one is a copy of (the LM head's weight names the
  /// token embedding). Both start from the target's values, and before each
  /// step both gradients become their sum, so the copies stay bitwise
  /// equal; the gradient norm counts the tensor once. In the file:
  /// "tied_to", absent when empty.
  std::string tiedTo;
};

struct ModelInfo {
  std::string name; ///< e.g. "gpt-tiny"
  int64_t vocab = 0;
  int64_t seqLen = 0;
  int64_t microbatchSize = 0; ///< sequences per microbatch (b)
  /// The Hugging Face config.json the model was imported from (its JSON
  /// text; empty for a model written as nn IR): the layout of a Hugging
  /// Face checkpoint of this model (--init-from) and the config written
  /// beside exported weights (--save-hf, pipeforge-export;
  /// docs/huggingface.md). In the file: "hf_config", a JSON object, absent
  /// when empty.
  std::string hfConfig;
};

struct TrainingInfo {
  std::string schedule; ///< "dualpipev", ..., or "none" (single process)
  int32_t pipelineRanks = 1;
  int32_t dataParallel = 1;
  int32_t microbatches = 1; ///< per step, over all copies (per EP rank)
  /// Expert parallelism (docs/runtime.md): the EP group size E. Each nn.moe
  /// layer's experts are split over E ranks; E = 1: no expert parallelism.
  int32_t expertParallel = 1;
  /// Tensor parallelism: the TP group size T (1: none). Each stage's
  /// kernels are what one rank of the group runs (--nn-shard-tensor).
  int32_t tensorParallel = 1;
  uint64_t seed = 1234;
};

struct Program {
  static constexpr uint32_t kVersion = 1;
  ModelInfo model;
  TrainingInfo training;
  std::vector<Param> params;
  std::vector<Stage> stages; ///< every (copy, stage), any order
  sched::Schedule schedule;  ///< per pipeline rank, messages included

  /// The stage record of (copy, stage), or null.
  const Stage *findStage(int copy, int stage) const {
    for (const Stage &s : stages)
      if (s.copy == copy && s.index == stage)
        return &s;
    return nullptr;
  }
};

/// Writes the program file (binary header + JSON body + checksum; see
/// docs/program-format.md).
Status writeProgram(const Program &p, const std::string &path);
std::string serializeProgram(const Program &p);

/// Reads and validates a program file: magic, version, size, checksum, then
/// every index, shape and binding. Errors name what is wrong and where.
Expected<Program> readProgram(const std::string &path);
Expected<Program> parseProgram(const std::string &bytes);

/// Checks internal consistency (used by the reader and the compiler) and,
/// when it holds, resolves every kernel's mnemonic to its OpKind
/// (Kernel::kind): a validated program's kernels name known ops with the
/// operands, results and types the registry (rt/OpShapes.h) requires.
Status validateProgram(Program &p);

/// Whether `spec` is a parameter initialiser the runtime knows
/// ("normal:<std>" with a finite std >= 0, "zeros", "ones"); the program
/// validator and the nn dialect's verifier of `nn.init` both ask here.
bool isValidInitSpec(const std::string &spec);
/// The accepted forms, for messages: "normal:<std>, zeros, ones".
inline constexpr const char *kInitSpecForms = "normal:<std>, zeros, ones";

/// A readable listing: settings, params, each stage's functions with their
/// kernels and buffers, and the per-rank actions.
std::string dumpProgram(const Program &p);

/// Names used in the file and in messages: "f32" "i32"; "activation"
/// "tokens" "targets" "param" "stash" "grad_in" "wstash"; "activation"
/// "loss" "stash" "grad_out" "wstash" "param_grad"; "forward"
/// "backward_input" "backward_weight" "backward".
const char *dtypeName(DType t);
const char *argRoleName(ArgRole r);
const char *resultRoleName(ResultRole r);
enum class FunctionKind : uint8_t {
  Forward,
  BackwardInput,
  BackwardWeight,
  Backward
};
const char *functionKindName(FunctionKind k);
/// The stage's function of that kind.
const Function &stageFunction(const Stage &s, FunctionKind k);
Function &stageFunction(Stage &s, FunctionKind k);

/// The file header (docs/program-format.md): magic, version, flags, body
/// length, FNV-1a 64 checksum of the body; all little-endian.
inline constexpr char kProgramMagic[8] = {'P', 'F', 'P', 'R', 'O', 'G', 0, 0};
inline constexpr size_t kProgramHeaderSize = 32;
uint64_t programChecksum(const std::string &body);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_PROGRAM_H
