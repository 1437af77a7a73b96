//===- OpShapes.cpp - Operands and shape rules of every kernel op ---------===//
//
// The table of OpShapes.h. The rules follow the nn dialect's ODS definitions
// (include/pipeforge/Dialect/NN/IR/NNOps.td) and what the CPU kernels read
// and write (runtime/backends/cpu/Kernels.h); the messages are the nn
// verifiers' (the MLIR side prefixes "'nn.<op>' op "). Every extent may be
// kDynamicDim on the MLIR side, so comparisons go through agree().
//
// Part of the contract (PipeForgeContract, contract/CMakeLists.txt), the
// plain C++ library both the runtime and the compiler link.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/OpShapes.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace pipeforge::rt {

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += shape[i] == kDynamicDim ? "?" : std::to_string(shape[i]);
  }
  return s + "]";
}

std::string typeString(const TensorType &t) {
  std::string s = dtypeName(t.dtype);
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i)
      s += "x";
    s += t.shape[i] == kDynamicDim ? "?" : std::to_string(t.shape[i]);
  }
  return s + "]";
}

namespace {

using Shape = std::vector<int64_t>;
using R = OpShapeResult;

/// Two extents agree when equal or when either is dynamic.
bool agree(int64_t a, int64_t b) {
  return a == b || a == kDynamicDim || b == kDynamicDim;
}
bool agree(const Shape &a, const Shape &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!agree(a[i], b[i]))
      return false;
  return true;
}
bool isDyn(int64_t d) { return d == kDynamicDim; }
std::string num(int64_t d) { return isDyn(d) ? "?" : std::to_string(d); }
int64_t rank(const TensorType &t) { return int64_t(t.shape.size()); }
Shape dropLast(const Shape &s) { return Shape(s.begin(), s.end() - 1); }
Shape append(Shape s, int64_t d) {
  s.push_back(d);
  return s;
}
TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }

R fail(int operand, std::string msg) {
  R r;
  r.error = std::move(msg);
  r.operand = operand;
  return r;
}

/// Saturating size arithmetic for workspace bounds: any product past
/// kMaxElements is reported as such, never wraps.
int64_t mulSat(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0)
    return 0;
  if (a > kMaxElements / b)
    return kMaxElements + 1;
  return a * b;
}
int64_t addSat(int64_t a, int64_t b) {
  return std::min(a + b, kMaxElements + 1); // both <= kMaxElements + 1
}
/// Elements of a static shape (0 with a dynamic extent: nothing to bound).
int64_t elements(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (isDyn(d))
      return 0;
    n = mulSat(n, d);
  }
  return n;
}
int64_t rows(const Shape &s) { // elements / last extent
  return s.empty() ? 1 : elements(dropLast(s));
}

/// Ends a shape function: results plus a workspace bound.
R done(std::vector<std::optional<TensorType>> results, int64_t workspace = 0) {
  R r;
  r.results = std::move(results);
  r.workspaceElements = workspace;
  if (workspace > kMaxElements)
    r.error = "needs more than 2^40 elements of scratch memory";
  return r;
}

//===--- attributes (absent: the declared default, OpSpec::attrs) ---===//

/// Reads the attributes of one instance as its op declares them: a present
/// attribute must have the declared type; an absent one takes the declared
/// value (OpAttrSpec::value), and a required one is an error.
struct Attrs {
  const AttrMap &m;
  const OpSpec &spec;
  std::string error;

  explicit Attrs(const OpShapeInput &in) : m(in.attrs), spec(*in.spec) {}

  const AttrValue *find(const char *name) const {
    auto it = m.find(name);
    return it == m.end() ? nullptr : &it->second;
  }
  /// Whether the op declares `name` (nn.moe's bias_update_speed is not one
  /// of its gradient ops').
  bool declared(const char *name) const { return spec.attr(name) != nullptr; }

  /// The declared value of an absent attribute; sets `error` when it is
  /// required (`what`: "integer", "number", ...) or not declared.
  const AttrValue *absent(const char *name, const char *what) {
    const OpAttrSpec *d = spec.attr(name);
    if (!d)
      error = std::string("internal error: '") + spec.name +
              "' declares no attribute '" + name + "'";
    else if (d->value)
      return &*d->value;
    else
      error = std::string("expects the ") + what + " attribute '" + name + "'";
    return nullptr;
  }
  const AttrValue *get(const char *name, const char *what) {
    const AttrValue *v = find(name);
    return v ? v : absent(name, what);
  }
  std::optional<int64_t> integer(const char *name) {
    const AttrValue *v = get(name, "integer");
    if (!v)
      return std::nullopt;
    if (auto *i = std::get_if<int64_t>(v))
      return *i;
    error = std::string("attribute '") + name + "' must be an integer";
    return std::nullopt;
  }
  std::optional<double> real(const char *name) {
    const AttrValue *v = get(name, "number");
    if (!v)
      return std::nullopt;
    if (auto *d = std::get_if<double>(v))
      return *d;
    if (auto *i = std::get_if<int64_t>(v))
      return double(*i);
    error = std::string("attribute '") + name + "' must be a number";
    return std::nullopt;
  }
  /// A unit attribute (absent: false) or a boolean one with a default.
  std::optional<bool> flag(const char *name) {
    const AttrValue *v = get(name, "flag");
    if (!v)
      return std::nullopt;
    if (auto *b = std::get_if<bool>(v))
      return *b;
    error = std::string("attribute '") + name + "' must be a flag";
    return std::nullopt;
  }
  std::optional<std::string> text(const char *name) {
    const AttrValue *v = get(name, "string");
    if (!v)
      return std::nullopt;
    if (auto *s = std::get_if<std::string>(v))
      return *s;
    error = std::string("attribute '") + name + "' must be a string";
    return std::nullopt;
  }
};

/// Operand `i` of the input (null: absent optional).
const TensorType *opd(const OpShapeInput &in, size_t i) {
  return i < in.operands.size() ? in.operands[i] : nullptr;
}

R checkEpsilon(Attrs &a) {
  auto eps = a.real("epsilon");
  if (!eps)
    return fail(-1, a.error);
  if (!(*eps > 0.0))
    return fail(-1, "expects epsilon > 0");
  return R{};
}

/// `t` must have the shape `want` (in the verifiers' words).
/// `what` describes `want` ("the shape of input [2, 8]"), by default
/// "shape [2, 8]".
std::optional<R> expectShape(int operand, const char *name, const TensorType &t,
                             const Shape &want, const std::string &what = "") {
  if (agree(t.shape, want))
    return std::nullopt;
  return fail(operand,
              std::string("expects ") + name + " of " +
                  (what.empty() ? "shape " + shapeString(want) : what) +
                  ", got " + shapeString(t.shape));
}
/// "the shape of input [2, 8]".
std::string shapeOf(const char *name, const TensorType &t) {
  return std::string("the shape of ") + name + " " + shapeString(t.shape);
}

//===--- linear ---===//

R inferLinear(const OpShapeInput &in) {
  const TensorType &x = *opd(in, 0), &w = *opd(in, 1);
  if (rank(x) < 1)
    return fail(0, "expects input of rank >= 1");
  if (rank(w) != 2)
    return fail(1, "expects weight of rank 2 ([out, in]), got rank " +
                       std::to_string(rank(w)));
  int64_t inF = x.shape.back(), out = w.shape[0];
  if (!agree(inF, w.shape[1]))
    return fail(1, "input features " + num(inF) + " do not match weight " +
                       shapeString(w.shape) + " ([out, in])");
  if (const TensorType *b = opd(in, 2))
    if (rank(*b) != 1 || !agree(b->shape[0], out))
      return fail(2, "expects bias of shape [" + num(out) + "], got " +
                         shapeString(b->shape));
  return done({f32(append(dropLast(x.shape), out))});
}

R inferLinearBwdInput(const OpShapeInput &in) {
  const TensorType &dy = *opd(in, 0), &w = *opd(in, 1);
  if (rank(dy) < 1)
    return fail(0, "expects result_grad of rank >= 1");
  if (rank(w) != 2)
    return fail(1, "expects weight of rank 2 ([out, in]), got rank " +
                       std::to_string(rank(w)));
  if (!agree(dy.shape.back(), w.shape[0]))
    return fail(0, "result_grad features " + num(dy.shape.back()) +
                       " do not match weight " + shapeString(w.shape) +
                       " ([out, in])");
  return done({f32(append(dropLast(dy.shape), w.shape[1]))});
}

R inferLinearBwdWeight(const OpShapeInput &in) {
  const TensorType &x = *opd(in, 0), &dy = *opd(in, 1);
  if (rank(x) < 1)
    return fail(0, "expects input of rank >= 1");
  if (rank(dy) != rank(x) || !agree(dropLast(dy.shape), dropLast(x.shape)))
    return fail(1, "expects result_grad of shape " +
                       shapeString(append(dropLast(x.shape), kDynamicDim)) +
                       " (the input's tokens), got " + shapeString(dy.shape));
  Attrs a(in);
  auto hasBias = a.flag("has_bias");
  if (!hasBias)
    return fail(-1, a.error);
  int64_t out = dy.shape.back(), inF = x.shape.back();
  std::optional<TensorType> db;
  if (*hasBias)
    db = f32({out});
  return done({f32({out, inF}), db});
}

//===--- layernorm, rmsnorm ---===//

/// (input, gamma [, beta]): `params` names the [d] operands after input.
R checkNorm(const OpShapeInput &in, std::initializer_list<const char *> params,
            Attrs &a) {
  const TensorType &x = *opd(in, 0);
  if (rank(x) < 1)
    return fail(0, "expects input of rank >= 1");
  int64_t d = x.shape.back();
  int i = 1;
  for (const char *name : params) {
    const TensorType &t = *opd(in, size_t(i));
    if (rank(t) != 1 || !agree(t.shape[0], d))
      return fail(i, std::string("expects ") + name + " of shape [" + num(d) +
                         "], got " + shapeString(t.shape));
    ++i;
  }
  return checkEpsilon(a);
}

/// Scratch of the norm kernels: mean and rstd per token; the gradient ops
/// also recompute the forward output (numel) and use ones / zeros [d].
int64_t normWorkspace(const TensorType &x, bool grad) {
  int64_t w = mulSat(2, rows(x.shape));
  if (grad)
    w = addSat(addSat(w, elements(x.shape)), mulSat(2, x.shape.back()));
  return w;
}

R inferLayerNorm(const OpShapeInput &in) {
  Attrs a(in);
  if (R r = checkNorm(in, {"gamma", "beta"}, a); !r)
    return r;
  return done({*opd(in, 0)}, normWorkspace(*opd(in, 0), false));
}
R inferRMSNorm(const OpShapeInput &in) {
  Attrs a(in);
  if (R r = checkNorm(in, {"gamma"}, a); !r)
    return r;
  return done({*opd(in, 0)}, normWorkspace(*opd(in, 0), false));
}

/// (input, gamma, result_grad) -> input_grad.
R inferNormBwdInput(const OpShapeInput &in) {
  Attrs a(in);
  if (R r = checkNorm(in, {"gamma"}, a); !r)
    return r;
  const TensorType &x = *opd(in, 0);
  if (auto e = expectShape(2, "result_grad", *opd(in, 2), x.shape,
                           shapeOf("input", x)))
    return *e;
  return done({x}, normWorkspace(x, true));
}

/// (input, result_grad) -> gamma_grad [, beta_grad].
R inferNormBwdWeight(const OpShapeInput &in, bool withBeta) {
  Attrs a(in);
  if (R r = checkNorm(in, {}, a); !r)
    return r;
  const TensorType &x = *opd(in, 0);
  if (auto e = expectShape(1, "result_grad", *opd(in, 1), x.shape,
                           shapeOf("input", x)))
    return *e;
  TensorType g = f32({x.shape.back()});
  if (withBeta)
    return done({g, g}, normWorkspace(x, true));
  return done({g}, normWorkspace(x, true));
}
R inferLayerNormBwdWeight(const OpShapeInput &in) {
  return inferNormBwdWeight(in, true);
}
R inferRMSNormBwdWeight(const OpShapeInput &in) {
  return inferNormBwdWeight(in, false);
}

//===--- elementwise ---===//

R inferUnary(const OpShapeInput &in) { return done({*opd(in, 0)}); }

/// A dropout rate attribute (`name`): in [0, 1).
R checkDropoutRate(Attrs &a, const char *name) {
  auto rate = a.real(name);
  if (!rate)
    return fail(-1, a.error);
  if (!(*rate >= 0.0 && *rate < 1.0)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", *rate);
    return fail(-1, std::string("expects ") + name + " in [0, 1), got " + got);
  }
  return R{};
}

/// nn.dropout: rate in [0, 1), site >= 0; the result has the input's shape.
R inferDropout(const OpShapeInput &in) {
  Attrs a(in);
  auto site = a.integer("site");
  if (!site)
    return fail(-1, a.error);
  if (*site < 0)
    return fail(-1, "expects site >= 0, got " + std::to_string(*site));
  if (R r = checkDropoutRate(a, "rate"); !r)
    return r;
  return inferUnary(in);
}

/// (a, b) -> a: b must have a's shape; `names` as in the ODS.
R inferBinary(const OpShapeInput &in, const char *first, const char *second) {
  const TensorType &x = *opd(in, 0);
  if (auto e = expectShape(1, second, *opd(in, 1), x.shape, shapeOf(first, x)))
    return *e;
  return done({x});
}
R inferAddMul(const OpShapeInput &in) { return inferBinary(in, "lhs", "rhs"); }
R inferActBwd(const OpShapeInput &in) {
  return inferBinary(in, "input", "result_grad");
}

//===--- embedding ---===//

R checkTokens(const TensorType &tok) {
  if (rank(tok) != 2)
    return fail(0, "expects tokens of rank 2 ([batch, seq]), got rank " +
                       std::to_string(rank(tok)));
  return R{};
}

std::optional<R> checkPositions(int operand, int64_t positions, int64_t seq) {
  if (!isDyn(positions) && !isDyn(seq) && positions < seq)
    return fail(operand, "has " + num(positions) +
                             " positions for sequences of length " + num(seq));
  return std::nullopt;
}

/// `vocab_shards` (absent: 1): the tensor-parallel ranks the table's rows
/// are split over.
R checkVocabShards(const OpShapeInput &in) {
  Attrs a(in);
  auto shards = a.integer("vocab_shards");
  if (!shards)
    return fail(-1, a.error);
  if (*shards < 1)
    return fail(-1,
                "expects vocab_shards >= 1, got " + std::to_string(*shards));
  return R{};
}

R inferEmbedding(const OpShapeInput &in) {
  const TensorType &tok = *opd(in, 0), &table = *opd(in, 1);
  if (R r = checkTokens(tok); !r)
    return r;
  if (rank(table) != 2)
    return fail(1, "expects a table of rank 2 ([vocab, hidden]), got rank " +
                       std::to_string(rank(table)));
  int64_t h = table.shape[1];
  if (R r = checkVocabShards(in); !r)
    return r;
  if (const TensorType *pos = opd(in, 2)) {
    if (rank(*pos) != 2 || !agree(pos->shape[1], h))
      return fail(2, "expects positions of shape [max_positions, " + num(h) +
                         "], got " + shapeString(pos->shape));
    if (auto e = checkPositions(2, pos->shape[0], tok.shape[1]))
      return *e;
  }
  return done({f32({tok.shape[0], tok.shape[1], h})});
}

R inferEmbeddingBwdWeight(const OpShapeInput &in) {
  const TensorType &tok = *opd(in, 0), &dy = *opd(in, 1);
  if (R r = checkTokens(tok); !r)
    return r;
  if (rank(dy) != 3 || !agree(dy.shape[0], tok.shape[0]) ||
      !agree(dy.shape[1], tok.shape[1]))
    return fail(1, "expects result_grad of shape [" + num(tok.shape[0]) + ", " +
                       num(tok.shape[1]) + ", hidden], got " +
                       shapeString(dy.shape));
  if (R r = checkVocabShards(in); !r)
    return r;
  Attrs a(in);
  auto vocab = a.integer("vocab");
  if (!vocab)
    return fail(-1, a.error);
  if (*vocab <= 0)
    return fail(-1, "expects vocab > 0, got " + std::to_string(*vocab));
  std::optional<TensorType> dpos;
  if (a.find("max_positions")) {
    auto n = a.integer("max_positions");
    if (!n)
      return fail(-1, a.error);
    if (*n <= 0)
      return fail(-1, "expects max_positions > 0, got " + std::to_string(*n));
    if (auto e = checkPositions(-1, *n, tok.shape[1]))
      return *e;
    dpos = f32({*n, dy.shape[2]});
  }
  return done({f32({*vocab, dy.shape[2]}), dpos});
}

//===--- attention ---===//

/// The checks of nn.attention on (q, k, v) and its attributes: q [b, s,
/// heads x d], k [b, s, kv x d], v [b, s, kv x dv] (dv may differ from d);
/// the result [b, s, heads x dv].
R checkAttention(const OpShapeInput &in, int64_t &numHeads, Shape &out) {
  const char *names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i)
    if (rank(*opd(in, size_t(i))) != 3)
      return fail(i, std::string("expects ") + names[i] +
                         " of rank 3 ([batch, seq, heads x head_dim]), got "
                         "rank " +
                         std::to_string(rank(*opd(in, size_t(i)))));
  Attrs a(in);
  auto heads = a.integer("num_heads");
  auto kv = heads ? a.integer("num_kv_heads") : std::nullopt;
  auto rotary = kv ? a.flag("rotary") : std::nullopt;
  auto theta = rotary ? a.real("rope_theta") : std::nullopt;
  auto ropeDim = theta ? a.integer("rope_dim") : std::nullopt;
  if (!ropeDim)
    return fail(-1, a.error);
  if (*heads <= 0 || *kv <= 0)
    return fail(-1, "expects num_heads and num_kv_heads > 0, got " +
                        std::to_string(*heads) + " and " + std::to_string(*kv));
  if (*heads % *kv != 0)
    return fail(-1, "num_heads " + std::to_string(*heads) +
                        " is not a multiple of num_kv_heads " +
                        std::to_string(*kv));
  const TensorType &q = *opd(in, 0);
  int64_t qw = q.shape[2];
  if (isDyn(qw))
    return fail(0, "expects a static feature dimension on q");
  if (qw % *heads != 0)
    return fail(0, "q features " + std::to_string(qw) +
                       " are not divisible by num_heads " +
                       std::to_string(*heads));
  int64_t d = qw / *heads;
  if (*ropeDim < 0 || *ropeDim > d)
    return fail(-1, "expects rope_dim in [0, " + std::to_string(d) +
                        "] (the head dimension), got " +
                        std::to_string(*ropeDim));
  if (*ropeDim > 0 && !*rotary)
    return fail(-1, "rope_dim " + std::to_string(*ropeDim) +
                        " needs the rotary attribute");
  int64_t rotated = *ropeDim > 0 ? *ropeDim : d;
  if (*rotary && rotated % 2 != 0)
    return fail(0, *ropeDim > 0
                       ? "rotary embedding needs an even rope_dim, got " +
                             std::to_string(rotated)
                       : "rotary embedding needs an even head dimension, got " +
                             std::to_string(d));
  if (R r = checkDropoutRate(a, "dropout"); !r)
    return r;
  numHeads = *heads;
  Shape kShape{q.shape[0], q.shape[1], *kv * d};
  if (!agree(opd(in, 1)->shape, kShape))
    return fail(1, "expects k of shape " + shapeString(kShape) + " (" +
                       std::to_string(*kv) + " kv heads of dimension " +
                       std::to_string(d) + "), got " +
                       shapeString(opd(in, 1)->shape));
  const TensorType &v = *opd(in, 2);
  int64_t vw = v.shape[2];
  if (isDyn(vw))
    return fail(2, "expects a static feature dimension on v");
  if (!agree(v.shape[0], q.shape[0]) || !agree(v.shape[1], q.shape[1]) ||
      vw % *kv != 0 || vw == 0)
    return fail(2, "expects v of shape [" + num(q.shape[0]) + ", " +
                       num(q.shape[1]) + ", " + std::to_string(*kv) +
                       " x dv] (" + std::to_string(*kv) +
                       " kv heads of value dimension dv > 0), got " +
                       shapeString(v.shape));
  out = {q.shape[0], q.shape[1], *heads * (vw / *kv)};
  return R{};
}

/// Probabilities [batch, heads, seq, seq], the rotated q and k, the [seq,
/// seq] score gradient of B (and the recomputed output for the gradient op).
int64_t attentionWorkspace(const OpShapeInput &in, int64_t heads,
                           const Shape &out, bool grad) {
  const TensorType &q = *opd(in, 0), &k = *opd(in, 1);
  int64_t s = q.shape[1];
  int64_t probs = mulSat(mulSat(q.shape[0], heads), mulSat(s, s));
  int64_t w = addSat(probs, addSat(elements(q.shape), elements(k.shape)));
  if (grad)
    w = addSat(w, addSat(mulSat(s, s), elements(out)));
  return w;
}

R inferAttention(const OpShapeInput &in) {
  int64_t heads = 0;
  Shape out;
  if (R r = checkAttention(in, heads, out); !r)
    return r;
  return done({f32(out)}, attentionWorkspace(in, heads, out, false));
}

R inferAttentionBwd(const OpShapeInput &in) {
  int64_t heads = 0;
  Shape out;
  if (R r = checkAttention(in, heads, out); !r)
    return r;
  if (auto e = expectShape(3, "result_grad", *opd(in, 3), out))
    return *e;
  return done({*opd(in, 0), *opd(in, 1), *opd(in, 2)},
              attentionWorkspace(in, heads, out, true));
}

//===--- concat_heads ---===//

/// The heads and the broadcast flag of nn.concat_heads(_bwd).
R checkConcatHeadsAttrs(Attrs &a, int64_t &heads, bool &broadcast) {
  auto h = a.integer("num_heads");
  auto bc = h ? a.flag("broadcast") : std::nullopt;
  if (!bc)
    return fail(-1, a.error);
  if (*h <= 0)
    return fail(-1, "expects num_heads > 0, got " + std::to_string(*h));
  heads = *h;
  broadcast = *bc;
  return R{};
}

/// The per-head width of `t`'s last extent over `heads` heads.
std::optional<R> headWidth(int operand, const char *name, const TensorType &t,
                           int64_t heads, int64_t &width) {
  if (t.shape.empty())
    return fail(operand, std::string("expects ") + name + " of rank >= 1");
  int64_t w = t.shape.back();
  if (isDyn(w))
    return fail(operand, std::string("expects a static last dimension on ") +
                             name);
  if (w == 0 || w % heads != 0)
    return fail(operand, std::string(name) + " features " + std::to_string(w) +
                             " are not a positive multiple of " +
                             std::to_string(heads) + " heads");
  width = w / heads;
  return std::nullopt;
}

R inferConcatHeads(const OpShapeInput &in) {
  Attrs a(in);
  int64_t heads = 0;
  bool broadcast = false;
  if (R r = checkConcatHeadsAttrs(a, heads, broadcast); !r)
    return r;
  const TensorType &l = *opd(in, 0), &r = *opd(in, 1);
  int64_t da = 0, db = 0;
  if (auto e = headWidth(0, "lhs", l, heads, da))
    return *e;
  if (auto e = headWidth(1, "rhs", r, broadcast ? 1 : heads, db))
    return *e;
  if (auto e = expectShape(1, "rhs", r, append(dropLast(l.shape), r.shape.back()),
                           "leading shape " + shapeString(dropLast(l.shape)) +
                               " (that of lhs)"))
    return *e;
  return done({f32(append(dropLast(l.shape), heads * (da + db)))});
}

R inferConcatHeadsBwd(const OpShapeInput &in) {
  Attrs a(in);
  int64_t heads = 0;
  bool broadcast = false;
  if (R r = checkConcatHeadsAttrs(a, heads, broadcast); !r)
    return r;
  auto lhsDim = a.integer("lhs_head_dim");
  if (!lhsDim)
    return fail(-1, a.error);
  const TensorType &dy = *opd(in, 0);
  int64_t d = 0;
  if (auto e = headWidth(0, "result_grad", dy, heads, d))
    return *e;
  if (*lhsDim <= 0 || *lhsDim >= d)
    return fail(-1, "expects lhs_head_dim in [1, " + std::to_string(d - 1) +
                        "] (below the result's head dimension " +
                        std::to_string(d) + "), got " +
                        std::to_string(*lhsDim));
  Shape lead = dropLast(dy.shape);
  int64_t db = d - *lhsDim;
  return done({f32(append(lead, heads * *lhsDim)),
               f32(append(lead, broadcast ? db : heads * db))});
}

//===--- moe ---===//

/// The routing attributes of nn.moe (cpu/MoERouting.h) for `e` experts.
R checkMoERouting(Attrs &a, int64_t e, int64_t topK) {
  auto scoring = a.text("scoring");
  auto norm = scoring ? a.flag("norm_topk_prob") : std::nullopt;
  auto scale = norm ? a.real("routed_scaling_factor") : std::nullopt;
  auto groups = scale ? a.integer("n_group") : std::nullopt;
  auto topkGroup = groups ? a.integer("topk_group") : std::nullopt;
  if (!topkGroup)
    return fail(-1, a.error);
  if (*scoring != "softmax" && *scoring != "sigmoid")
    return fail(-1, "scoring must be \"softmax\" or \"sigmoid\", got \"" +
                        *scoring + "\"");
  if (!(*scale > 0.0) || *scale > 3.4e38)
    return fail(-1, "expects a finite routed_scaling_factor > 0");
  if (*groups < 1 || *groups > 64)
    return fail(-1, "expects 1 <= n_group <= 64, got " +
                        std::to_string(*groups));
  if (*topkGroup < 1 || *topkGroup > *groups)
    return fail(-1, "expects 1 <= topk_group <= n_group (" +
                        std::to_string(*groups) + "), got " +
                        std::to_string(*topkGroup));
  if (isDyn(e))
    return R{};
  if (e % *groups)
    return fail(-1, "n_group " + std::to_string(*groups) +
                        " does not divide the " + std::to_string(e) +
                        " experts");
  if (*topkGroup * (e / *groups) < topK)
    return fail(-1, "top_k " + std::to_string(topK) + " exceeds the " +
                        std::to_string(*topkGroup * (e / *groups)) +
                        " experts of the topk_group best groups");
  return R{};
}

/// The load-balancing bias of nn.moe (DeepSeek-V3's noaux_tc): `bias`
/// names the per-expert state, `bias_update_speed` its step (needs `bias`).
R checkMoEBias(Attrs &a) {
  const bool has = a.find("bias") != nullptr;
  auto name = has ? a.text("bias") : std::optional<std::string>("");
  // The gradient ops do not declare bias_update_speed (only nn.moe's
  // bias state is updated).
  std::optional<double> speed = 0.0;
  if (name && (a.declared("bias_update_speed") || a.find("bias_update_speed")))
    speed = a.real("bias_update_speed");
  if (!name || !speed)
    return fail(-1, a.error);
  if (has && name->empty())
    return fail(-1, "expects a non-empty bias state name");
  if (!has && a.find("bias_update_speed"))
    return fail(-1, "has a bias_update_speed but no bias");
  if (!(*speed >= 0.0) || *speed > 3.4e38)
    return fail(-1, "expects a finite bias_update_speed >= 0");
  return R{};
}

/// The checks of nn.moe on (input, router, w1, w2, w3?) and its attributes.
R checkMoE(const OpShapeInput &in, int64_t &workspace, bool grad) {
  const TensorType &x = *opd(in, 0), &r = *opd(in, 1), &w1 = *opd(in, 2),
                   &w2 = *opd(in, 3);
  if (rank(x) < 1)
    return fail(0, "expects input of rank >= 1");
  int64_t h = x.shape.back();
  if (rank(r) != 2 || !agree(r.shape[1], h))
    return fail(1, "expects router of shape [experts, " + num(h) + "], got " +
                       shapeString(r.shape));
  int64_t e = r.shape[0];
  if (rank(w1) != 3 || !agree(w1.shape[0], e) || !agree(w1.shape[2], h))
    return fail(2, "expects w1 of shape [" + num(e) + ", ffn, " + num(h) +
                       "], got " + shapeString(w1.shape));
  int64_t f = w1.shape[1];
  if (auto err = expectShape(3, "w2", w2, {e, h, f}))
    return *err;
  if (const TensorType *w3 = opd(in, 4); w3 && w3->shape != w1.shape)
    return fail(4, "expects w3 of the shape of w1 " + shapeString(w1.shape) +
                       ", got " + shapeString(w3->shape));
  Attrs a(in);
  auto topK = a.integer("top_k");
  auto cf = topK ? a.real("capacity_factor") : std::nullopt;
  auto act = cf ? a.text("activation") : std::nullopt;
  if (!act)
    return fail(-1, a.error);
  if (*topK <= 0)
    return fail(-1, "expects top_k > 0, got " + std::to_string(*topK));
  if (!isDyn(e) && *topK > e)
    return fail(-1, "top_k " + std::to_string(*topK) + " exceeds the " +
                        std::to_string(e) + " experts");
  if (*cf < 0.0)
    return fail(-1, "expects capacity_factor >= 0");
  if (*act != "gelu" && *act != "silu")
    return fail(-1, "activation must be \"gelu\" or \"silu\", got \"" + *act +
                        "\"");
  if (R r = checkMoERouting(a, e, *topK); !r)
    return r;
  if (R r = checkMoEBias(a); !r)
    return r;
  // Routing: probabilities (and their gradient) [tokens, E], top-k ids,
  // gates and rows [tokens, k]; per dispatched row (at most tokens x k)
  // gathered inputs and expert outputs [hidden], pre-activations,
  // activations and the gate [ffn], twice hidden + ffn of B/W scratch.
  int64_t n = rows(x.shape), rowsK = mulSat(n, *topK);
  int64_t perRow = addSat(mulSat(4, h), mulSat(5, f));
  workspace = addSat(addSat(mulSat(2, mulSat(n, e)), mulSat(3, rowsK)),
                     mulSat(rowsK, perRow));
  if (grad)
    workspace = addSat(workspace, elements(x.shape));
  return R{};
}

R inferMoE(const OpShapeInput &in) {
  int64_t ws = 0;
  if (R r = checkMoE(in, ws, false); !r)
    return r;
  return done({*opd(in, 0)}, ws);
}

R checkMoEGrad(const OpShapeInput &in, int64_t &ws) {
  if (R r = checkMoE(in, ws, true); !r)
    return r;
  // result_grad is slot 5 whether or not w3 (slot 4) is present.
  const TensorType &x = *opd(in, 0);
  if (auto e = expectShape(5, "result_grad", *opd(in, 5), x.shape,
                           shapeOf("input", x)))
    return *e;
  return R{};
}

R inferMoEBwdInput(const OpShapeInput &in) {
  int64_t ws = 0;
  if (R r = checkMoEGrad(in, ws); !r)
    return r;
  return done({*opd(in, 0)}, ws);
}

R inferMoEBwdWeight(const OpShapeInput &in) {
  int64_t ws = 0;
  if (R r = checkMoEGrad(in, ws); !r)
    return r;
  std::optional<TensorType> dw3;
  if (const TensorType *w3 = opd(in, 4))
    dw3 = *w3;
  return done({*opd(in, 1), *opd(in, 2), *opd(in, 3), dw3}, ws);
}

//===--- cross_entropy ---===//

R checkCrossEntropy(const OpShapeInput &in) {
  const TensorType &logits = *opd(in, 0), &targets = *opd(in, 1);
  if (rank(logits) < 2)
    return fail(0, "expects logits of rank >= 2 ([..., vocab]), got rank " +
                       std::to_string(rank(logits)));
  Shape lead = dropLast(logits.shape);
  if (!agree(targets.shape, lead))
    return fail(1, "targets " + shapeString(targets.shape) +
                       " do not match the logits' leading shape " +
                       shapeString(lead));
  return R{};
}

R inferCrossEntropy(const OpShapeInput &in) {
  if (R r = checkCrossEntropy(in); !r)
    return r;
  return done({f32({})}, rows(opd(in, 0)->shape));
}

R inferCrossEntropyBwd(const OpShapeInput &in) {
  if (R r = checkCrossEntropy(in); !r)
    return r;
  const TensorType &g = *opd(in, 2);
  if (!g.shape.empty())
    return fail(2, "expects loss_grad of shape [] (the scalar loss), got " +
                       shapeString(g.shape));
  return done({*opd(in, 0)}, rows(opd(in, 0)->shape));
}

//===--- tensor parallelism (docs/tensor-parallel.md) ---===//

/// The required group size `tp` (>= 2); on failure `err` says why.
std::optional<int64_t> groupSize(const OpShapeInput &in, R &err) {
  Attrs a(in);
  auto tp = a.integer("tp");
  if (!tp) {
    err = fail(-1, a.error);
    return std::nullopt;
  }
  if (*tp < 2) {
    err = fail(-1, "expects tp >= 2 (a tensor-parallel group), got " +
                       std::to_string(*tp));
    return std::nullopt;
  }
  return tp;
}

R inferTPUnary(const OpShapeInput &in) {
  R err;
  if (!groupSize(in, err))
    return err;
  return done({*opd(in, 0)});
}

/// tp_all_gather (`gather`: the result's `dim` is tp times the input's) and
/// tp_reduce_scatter (divided by tp, which must divide it).
R inferTPGatherScatter(const OpShapeInput &in, bool gather) {
  R err;
  auto tp = groupSize(in, err);
  if (!tp)
    return err;
  Attrs a(in);
  auto dim = a.integer("dim");
  if (!dim)
    return fail(-1, a.error);
  const TensorType &x = *opd(in, 0);
  if (*dim < 0 || *dim >= rank(x))
    return fail(0, "expects dim in [0, " + std::to_string(rank(x)) +
                       ") for an input of rank " + std::to_string(rank(x)) +
                       ", got " + std::to_string(*dim));
  Shape out = x.shape;
  int64_t &d = out[size_t(*dim)];
  if (!isDyn(d)) {
    if (gather) {
      d = mulSat(d, *tp);
    } else {
      if (d % *tp)
        return fail(0, "expects input dimension " + std::to_string(*dim) +
                           " (" + num(d) +
                           ") to be divisible by tp = " + std::to_string(*tp));
      d /= *tp;
    }
  }
  return done({f32(out)});
}
R inferTPAllGather(const OpShapeInput &in) {
  return inferTPGatherScatter(in, true);
}
R inferTPReduceScatter(const OpShapeInput &in) {
  return inferTPGatherScatter(in, false);
}

/// Scratch of the vocabulary-parallel loss: max, sum of exponentials and
/// target logit per token.
R inferVocabParallelCrossEntropy(const OpShapeInput &in) {
  R err;
  if (!groupSize(in, err))
    return err;
  if (R r = checkCrossEntropy(in); !r)
    return r;
  return done({f32({})}, mulSat(3, rows(opd(in, 0)->shape)));
}
R inferVocabParallelCrossEntropyBwd(const OpShapeInput &in) {
  R err;
  if (!groupSize(in, err))
    return err;
  R r = inferCrossEntropyBwd(in);
  if (r)
    r.workspaceElements =
        addSat(r.workspaceElements, mulSat(2, rows(opd(in, 0)->shape)));
  return r;
}

//===--- the table ---===//

constexpr DType F = DType::F32, I = DType::I32;
using A = OpAttrSpec;
constexpr AttrType Int = AttrType::Int, Real = AttrType::Real,
                   Flag = AttrType::Flag, Text = AttrType::Text;

/// Attribute declarations, as in NNOps.td: required, DefaultValuedAttr
/// (with the ODS default), OptionalAttr / UnitAttr (with what absence
/// means, where it means a value).
A required(const char *n, AttrType t) { return {n, t, A::Required, {}}; }
A withDefault(const char *n, AttrType t, AttrValue v) {
  return {n, t, A::Default, std::move(v)};
}
A optional(const char *n, AttrType t,
           std::optional<AttrValue> absent = std::nullopt) {
  return {n, t, A::Optional, std::move(absent)};
}
/// A UnitAttr: present (true) or absent (false).
A unit(const char *n) { return optional(n, Flag, false); }
A epsilon() { return withDefault("epsilon", Real, 1e-5); }

std::vector<A> attentionAttrs() {
  return {required("num_heads", Int),
          required("num_kv_heads", Int),
          unit("rotary"),
          withDefault("rope_theta", Real, 10000.0),
          withDefault("dropout", Real, 0.0),
          withDefault("dropout_site", Int, int64_t(0)),
          withDefault("rope_dim", Int, int64_t(0))};
}
/// nn.moe's and its gradient ops' (`forward`: with bias_update_speed).
std::vector<A> moeAttrs(bool forward) {
  std::vector<A> v = {required("top_k", Int),
                      withDefault("capacity_factor", Real, 0.0),
                      withDefault("activation", Text, std::string("gelu")),
                      withDefault("scoring", Text, std::string("softmax")),
                      withDefault("norm_topk_prob", Flag, true),
                      withDefault("routed_scaling_factor", Real, 1.0),
                      withDefault("n_group", Int, int64_t(1)),
                      withDefault("topk_group", Int, int64_t(1)),
                      optional("bias", Text)};
  if (forward) // docs/runtime.md "MoE load balancing": absent means 0.001
    v.push_back(optional("bias_update_speed", Real, 0.001));
  return v;
}
std::vector<OpOperandSpec> moeOperands(bool grad) {
  std::vector<OpOperandSpec> v = {
      {"input", F}, {"router", F}, {"w1", F}, {"w2", F}, {"w3", F, true}};
  if (grad)
    v.push_back({"result_grad", F});
  return v;
}
/// vocab_shards: the tensor-parallel ranks the table is split over.
A vocabShards() { return optional("vocab_shards", Int, int64_t(1)); }
A tp() { return required("tp", Int); }

/// One entry per OpKind, in OpKind order (the byte order of the names).
std::vector<OpSpec> buildTable() {
  using K = OpKind;
  std::vector<OpSpec> t = {
      {K::Add,
       "add",
       {{"lhs", F}, {"rhs", F}},
       {{"result", F}},
       {},
       inferAddMul},
      {K::Attention,
       "attention",
       {{"q", F}, {"k", F}, {"v", F}},
       {{"result", F}},
       attentionAttrs(),
       inferAttention},
      // Gradient ops (--pp-split-backward, docs/split-backward.md) beside
      // their forward ops.
      {K::AttentionBwd,
       "attention_bwd",
       {{"q", F}, {"k", F}, {"v", F}, {"result_grad", F}},
       {{"q_grad", F}, {"k_grad", F}, {"v_grad", F}},
       attentionAttrs(),
       inferAttentionBwd},
      {K::ConcatHeads,
       "concat_heads",
       {{"lhs", F}, {"rhs", F}},
       {{"result", F}},
       {required("num_heads", Int), unit("broadcast")},
       inferConcatHeads},
      {K::ConcatHeadsBwd,
       "concat_heads_bwd",
       {{"result_grad", F}},
       {{"lhs_grad", F}, {"rhs_grad", F}},
       {required("num_heads", Int), required("lhs_head_dim", Int),
        unit("broadcast")},
       inferConcatHeadsBwd},
      {K::CrossEntropy,
       "cross_entropy",
       {{"logits", F}, {"targets", I}},
       {{"loss", F}},
       {},
       inferCrossEntropy},
      {K::CrossEntropyBwd,
       "cross_entropy_bwd",
       {{"logits", F}, {"targets", I}, {"loss_grad", F}},
       {{"logits_grad", F}},
       {},
       inferCrossEntropyBwd},
      {K::Dropout,
       "dropout",
       {{"input", F}},
       {{"result", F}},
       {required("rate", Real), required("site", Int)},
       inferDropout},
      {K::Embedding,
       "embedding",
       {{"tokens", I}, {"table", F}, {"positions", F, true}},
       {{"result", F}},
       {vocabShards()},
       inferEmbedding},
      {K::EmbeddingBwdWeight,
       "embedding_bwd_weight",
       {{"tokens", I}, {"result_grad", F}},
       {{"table_grad", F}, {"positions_grad", F, true}},
       {required("vocab", Int), optional("max_positions", Int), vocabShards()},
       inferEmbeddingBwdWeight},
      {K::Gelu, "gelu", {{"input", F}}, {{"result", F}}, {}, inferUnary},
      {K::GeluBwd,
       "gelu_bwd",
       {{"input", F}, {"result_grad", F}},
       {{"input_grad", F}},
       {},
       inferActBwd},
      {K::LayerNorm,
       "layernorm",
       {{"input", F}, {"gamma", F}, {"beta", F}},
       {{"result", F}},
       {epsilon()},
       inferLayerNorm},
      {K::LayerNormBwdInput,
       "layernorm_bwd_input",
       {{"input", F}, {"gamma", F}, {"result_grad", F}},
       {{"input_grad", F}},
       {epsilon()},
       inferNormBwdInput},
      {K::LayerNormBwdWeight,
       "layernorm_bwd_weight",
       {{"input", F}, {"result_grad", F}},
       {{"gamma_grad", F}, {"beta_grad", F}},
       {epsilon()},
       inferLayerNormBwdWeight},
      {K::Linear,
       "linear",
       {{"input", F}, {"weight", F}, {"bias", F, true}},
       {{"result", F}},
       {unit("partial")},
       inferLinear},
      {K::LinearBwdInput,
       "linear_bwd_input",
       {{"result_grad", F}, {"weight", F}},
       {{"input_grad", F}},
       {},
       inferLinearBwdInput},
      {K::LinearBwdWeight,
       "linear_bwd_weight",
       {{"input", F}, {"result_grad", F}},
       {{"weight_grad", F}, {"bias_grad", F, true}},
       {unit("has_bias")},
       inferLinearBwdWeight},
      {K::MoE,
       "moe",
       moeOperands(false),
       {{"result", F}},
       moeAttrs(true),
       inferMoE},
      {K::MoEBwdInput,
       "moe_bwd_input",
       moeOperands(true),
       {{"input_grad", F}},
       moeAttrs(false),
       inferMoEBwdInput},
      {K::MoEBwdWeight,
       "moe_bwd_weight",
       moeOperands(true),
       {{"router_grad", F},
        {"w1_grad", F},
        {"w2_grad", F},
        {"w3_grad", F, true}},
       moeAttrs(false),
       inferMoEBwdWeight},
      {K::Mul,
       "mul",
       {{"lhs", F}, {"rhs", F}},
       {{"result", F}},
       {},
       inferAddMul},
      {K::RMSNorm,
       "rmsnorm",
       {{"input", F}, {"gamma", F}},
       {{"result", F}},
       {epsilon()},
       inferRMSNorm},
      {K::RMSNormBwdInput,
       "rmsnorm_bwd_input",
       {{"input", F}, {"gamma", F}, {"result_grad", F}},
       {{"input_grad", F}},
       {epsilon()},
       inferNormBwdInput},
      {K::RMSNormBwdWeight,
       "rmsnorm_bwd_weight",
       {{"input", F}, {"result_grad", F}},
       {{"gamma_grad", F}},
       {epsilon()},
       inferRMSNormBwdWeight},
      {K::Silu, "silu", {{"input", F}}, {{"result", F}}, {}, inferUnary},
      {K::SiluBwd,
       "silu_bwd",
       {{"input", F}, {"result_grad", F}},
       {{"input_grad", F}},
       {},
       inferActBwd},
      // Tensor parallelism: collectives over the tensor-parallel group,
      // run by the executor.
      {K::TPAllGather,
       "tp_all_gather",
       {{"input", F}},
       {{"result", F}},
       {tp(), required("dim", Int)},
       inferTPAllGather,
       true},
      {K::TPAllReduce,
       "tp_all_reduce",
       {{"input", F}},
       {{"result", F}},
       {tp()},
       inferTPUnary,
       true},
      {K::TPCopy,
       "tp_copy",
       {{"input", F}},
       {{"result", F}},
       {tp()},
       inferTPUnary,
       true},
      {K::TPReduceScatter,
       "tp_reduce_scatter",
       {{"input", F}},
       {{"result", F}},
       {tp(), required("dim", Int)},
       inferTPReduceScatter,
       true},
      {K::VocabParallelCrossEntropy,
       "vocab_parallel_cross_entropy",
       {{"logits", F}, {"targets", I}},
       {{"loss", F}},
       {tp()},
       inferVocabParallelCrossEntropy,
       true},
      {K::VocabParallelCrossEntropyBwd,
       "vocab_parallel_cross_entropy_bwd",
       {{"logits", F}, {"targets", I}, {"loss_grad", F}},
       {{"logits_grad", F}},
       {tp()},
       inferVocabParallelCrossEntropyBwd,
       true},
      // A zero constant (arith.constant 0, e.g. the gradient of a parameter
      // the loss does not depend on): no operands, and its result has the
      // type the program gives it (no shape function). Not an nn op.
      {K::Zeros, "zeros", {}, {{"result", F}}, {}, nullptr},
  };
  // The order is the enum's and the names' (lookups are binary searches);
  // OpRegistryTest checks it too.
  for (size_t i = 0; i <= t.size(); ++i)
    if (i == t.size()
            ? i != kNumOpKinds
            : size_t(t[i].kind) != i ||
                  (i && !(std::string_view(t[i - 1].name) < t[i].name))) {
      std::fprintf(stderr,
                   "internal error: the op registry is not in "
                   "OpKind order at entry %zu\n",
                   i);
      std::abort();
    }
  return t;
}

std::string slotName(const std::vector<OpOperandSpec> &slots, int s) {
  return s >= 0 && size_t(s) < slots.size() ? slots[size_t(s)].name : "?";
}

} // namespace

const std::vector<OpSpec> &allOpSpecs() {
  static const std::vector<OpSpec> table = buildTable();
  return table;
}

const OpSpec &opSpec(OpKind kind) { return allOpSpecs()[size_t(kind)]; }

const OpSpec *lookupOpSpec(std::string_view name) {
  const auto &t = allOpSpecs();
  auto it = std::lower_bound(
      t.begin(), t.end(), name,
      [](const OpSpec &s, std::string_view n) { return s.name < n; });
  return it != t.end() && it->name == name ? &*it : nullptr;
}

OpKind lookupOpKind(std::string_view mnemonic) {
  const OpSpec *s = lookupOpSpec(mnemonic);
  return s ? s->kind : OpKind::Unknown;
}

const char *opName(OpKind kind) {
  return kind == OpKind::Unknown ? "?" : opSpec(kind).name;
}

std::string opNameList() {
  std::string known;
  for (const OpSpec &o : allOpSpecs())
    known += std::string(known.empty() ? "" : " ") + o.name;
  return known;
}

const OpAttrSpec *OpSpec::attr(std::string_view attrName) const {
  for (const OpAttrSpec &a : attrs)
    if (attrName == a.name)
      return &a;
  return nullptr;
}

std::string mapSlots(const std::vector<OpOperandSpec> &slots, size_t given,
                     std::vector<int> &slotOf) {
  size_t optional =
      size_t(std::count_if(slots.begin(), slots.end(),
                           [](const OpOperandSpec &s) { return s.optional; }));
  slotOf.assign(slots.size(), -1);
  if (given == slots.size()) {
    for (size_t s = 0; s < slots.size(); ++s)
      slotOf[s] = int(s);
    return "";
  }
  if (optional == 1 && given + 1 == slots.size()) {
    int at = 0;
    for (size_t s = 0; s < slots.size(); ++s)
      if (!slots[s].optional)
        slotOf[s] = at++;
    return "";
  }
  size_t required = slots.size() - optional;
  std::string names;
  for (const OpOperandSpec &s : slots)
    names += std::string(names.empty() ? "" : ", ") + s.name +
             (s.optional ? "?" : "");
  return "expects " +
         (required == slots.size() ? std::to_string(required)
                                   : std::to_string(required) + " to " +
                                         std::to_string(slots.size())) +
         " (" + names + "), got " + std::to_string(given);
}

OpShapeResult inferOpShapes(const OpSpec &spec, const OpShapeInput &in) {
  for (size_t s = 0; s < spec.operands.size(); ++s) {
    const OpOperandSpec &os = spec.operands[s];
    const TensorType *t = opd(in, s);
    if (!t) {
      if (os.optional)
        continue;
      return fail(int(s), std::string("operand ") + os.name + " is missing");
    }
    if (t->dtype != os.dtype)
      return fail(int(s), std::string("expects ") + os.name +
                              " of element type " + dtypeName(os.dtype) +
                              ", got " + typeString(*t));
  }
  if (!spec.infer) // zeros: nothing to derive
    return OpShapeResult{};
  OpShapeResult r = spec.infer(OpShapeInput{in.operands, in.attrs, &spec});
  if (r && r.results.size() != spec.results.size())
    r.error = "internal error: the shape function of '" +
              std::string(spec.name) + "' returned " +
              std::to_string(r.results.size()) + " results";
  return r;
}

OpShapeResult checkKernelTypes(const OpSpec &spec,
                               const std::vector<const TensorType *> &inputs,
                               const std::vector<const TensorType *> &outputs,
                               const AttrMap &attrs) {
  std::vector<int> inSlot, outSlot;
  if (std::string e = mapSlots(spec.operands, inputs.size(), inSlot);
      !e.empty())
    return fail(-1, "operands: " + e);
  if (std::string e = mapSlots(spec.results, outputs.size(), outSlot);
      !e.empty())
    return fail(-1, "results: " + e);
  OpShapeInput in{{}, attrs};
  for (int pos : inSlot)
    in.operands.push_back(pos < 0 ? nullptr : inputs[size_t(pos)]);
  OpShapeResult r = inferOpShapes(spec, in);
  if (!r) {
    if (r.operand >= 0)
      r.operand = inSlot[size_t(r.operand)];
    return r;
  }
  for (size_t s = 0; s < spec.results.size(); ++s) {
    int pos = outSlot[s];
    const TensorType *got = pos < 0 ? nullptr : outputs[size_t(pos)];
    if (!spec.infer) { // the result type is the program's: only its dtype
      if (!got || got->dtype != spec.results[s].dtype) {
        OpShapeResult e =
            fail(-1, slotName(spec.results, int(s)) + " must be an f32 tensor");
        e.result = pos;
        return e;
      }
      continue;
    }
    const std::optional<TensorType> &want = r.results[s];
    std::string name = slotName(spec.results, int(s));
    auto bad = [&](std::string m) {
      OpShapeResult e = fail(-1, std::move(m));
      e.result = pos;
      return e;
    };
    if (want && !got)
      return bad(name + " (" + typeString(*want) + ") is missing");
    if (!want && got)
      return bad(name +
                 " must be absent (the operands and attributes do not "
                 "produce it), got " +
                 typeString(*got));
    if (want && (got->dtype != want->dtype || got->shape != want->shape))
      return bad(name + " is " + typeString(*got) + ", expected " +
                 typeString(*want));
  }
  return r;
}

} // namespace pipeforge::rt
