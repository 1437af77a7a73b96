//===- KernelOperands.cpp - Reading a KernelCall's operands and shapes --===//

#include "KernelOperands.h"
#include "cpu/DropoutRng.h"

namespace pipeforge::rt::ops {

using namespace cpu;

Status opError(const Kernel &k, const std::string &msg) {
  return Status::error("kernel '" + k.op + "': " + msg);
}

int64_t attrInt(const Kernel &k, const char *name, int64_t dflt) {
  auto it = k.attrs.find(name);
  if (it == k.attrs.end())
    return dflt;
  if (auto *v = std::get_if<int64_t>(&it->second))
    return *v;
  if (auto *v = std::get_if<double>(&it->second))
    return int64_t(*v);
  if (auto *v = std::get_if<bool>(&it->second))
    return *v;
  return dflt;
}
double attrFloat(const Kernel &k, const char *name, double dflt) {
  auto it = k.attrs.find(name);
  if (it == k.attrs.end())
    return dflt;
  if (auto *v = std::get_if<double>(&it->second))
    return *v;
  if (auto *v = std::get_if<int64_t>(&it->second))
    return double(*v);
  return dflt;
}
bool attrBool(const Kernel &k, const char *name) {
  auto it = k.attrs.find(name);
  if (it == k.attrs.end())
    return false;
  if (auto *v = std::get_if<bool>(&it->second))
    return *v;
  if (auto *v = std::get_if<int64_t>(&it->second))
    return *v != 0;
  return true; // a present unit attribute of another kind
}
std::string attrStr(const Kernel &k, const char *name, const char *dflt) {
  auto it = k.attrs.find(name);
  if (it == k.attrs.end())
    return dflt;
  if (auto *v = std::get_if<std::string>(&it->second))
    return *v;
  return dflt;
}

int64_t lastDim(const TensorType *t) {
  return t && !t->shape.empty() ? t->shape.back() : 1;
}
int64_t numel(const TensorType *t) { return t ? t->numElements() : 0; }
int64_t firstDim(const TensorType *t) {
  return t && !t->shape.empty() ? t->shape[0] : 0;
}

LinearShape linearShape(const Operands &o) {
  LinearShape sh;
  sh.in = lastDim(o.t(0));
  sh.out = firstDim(o.t(1));
  sh.tokens = sh.in ? numel(o.t(0)) / sh.in : 0;
  sh.hasBias = o.f(2) != nullptr;
  return sh;
}
LinearShape linearBwdInputShape(const Operands &o) {
  LinearShape sh;
  sh.out = lastDim(o.t(0));
  sh.in = lastDim(o.t(1));
  sh.tokens = sh.out ? numel(o.t(0)) / sh.out : 0;
  return sh;
}
LinearShape linearBwdWeightShape(const Operands &o) {
  LinearShape sh;
  sh.in = lastDim(o.t(0));
  sh.out = lastDim(o.t(1));
  sh.tokens = sh.in ? numel(o.t(0)) / sh.in : 0;
  sh.hasBias = o.o(1) != nullptr;
  return sh;
}
NormShape normShape(const Kernel &k, const Operands &o) {
  NormShape sh{0, lastDim(o.t(0)), attrFloat(k, "epsilon")};
  sh.tokens = sh.hidden ? numel(o.t(0)) / sh.hidden : 0;
  return sh;
}
/// Vocabulary parallelism: `vocab_shards` (the program's) and `vocab_start`
/// (what the executor sets for its tensor-parallel rank).
static void vocabShard(const Kernel &k, EmbeddingShape &sh) {
  sh.vocabShards = std::max<Index>(1, attrInt(k, "vocab_shards"));
  sh.vocabStart = std::max<Index>(0, attrInt(k, "vocab_start", 0));
}
EmbeddingShape embeddingShape(const Kernel &k, const Operands &o) {
  EmbeddingShape sh;
  sh.seq = lastDim(o.t(0));
  sh.batch = sh.seq ? numel(o.t(0)) / sh.seq : 0;
  sh.hidden = lastDim(o.t(1));
  sh.vocab = firstDim(o.t(1));
  sh.learnedPositions = o.f(2) != nullptr;
  vocabShard(k, sh);
  return sh;
}
EmbeddingShape embeddingBwdShape(const Kernel &k, const Operands &o) {
  EmbeddingShape sh;
  sh.seq = lastDim(o.t(0));
  sh.batch = sh.seq ? numel(o.t(0)) / sh.seq : 0;
  sh.hidden = lastDim(o.t(1));
  sh.vocab = attrInt(k, "vocab", firstDim(o.ot(0)));
  sh.learnedPositions = o.o(1) != nullptr;
  vocabShard(k, sh);
  return sh;
}
CrossEntropyShape crossEntropyShape(const Operands &o) {
  CrossEntropyShape sh{0, lastDim(o.t(0))};
  sh.tokens = sh.vocab ? numel(o.t(0)) / sh.vocab : 0;
  return sh;
}

Status dropoutShape(const Kernel &k, const Operands &o, DropoutShape &s) {
  const TensorType *x = o.t(0);
  if (!x || x->shape.size() != 3)
    return opError(k, "input must be [batch, seq, features]");
  s.batch = x->shape[0];
  s.seq = x->shape[1];
  s.features = x->shape[2];
  s.seqStart = attrInt(k, "seq_start", 0);
  s.rate = attrFloat(k, "rate", 0.0);
  if (!(s.rate >= 0.0 && s.rate < 1.0))
    return opError(k, "rate must be in [0, 1)");
  s.key = dropout::siteKey(o.c.rngKey, attrInt(k, "site", 0));
  return Status::ok();
}

Status attentionShape(const Kernel &k, const Operands &o, AttentionShape &s) {
  const TensorType *q = o.t(0), *kk = o.t(1);
  if (!q || q->shape.size() < 3)
    return opError(k, "q must be [batch, seq, heads*d]");
  s.seq = q->shape[q->shape.size() - 2];
  s.batch = s.seq ? q->numElements() / (s.seq * q->shape.back()) : 0;
  s.heads = attrInt(k, "num_heads", 0);
  s.kvHeads = attrInt(k, "num_kv_heads", s.heads);
  if (s.heads <= 0 || s.kvHeads <= 0)
    return opError(k, "num_heads / num_kv_heads must be positive");
  s.headDim = q->shape.back() / s.heads;
  s.rotary = attrFlag(k, "rotary");
  s.ropeDim = attrInt(k, "rope_dim");
  s.ropeTheta = attrFloat(k, "rope_theta");
  s.dropout = attrFloat(k, "dropout");
  if (!(s.dropout >= 0.0 && s.dropout < 1.0))
    return opError(k, "dropout must be in [0, 1)");
  s.dropoutKey = dropout::siteKey(o.c.rngKey, attrInt(k, "dropout_site"));
  s.headStart = attrInt(k, "head_start", 0);
  const int64_t vw = lastDim(o.t(2));
  s.vHeadDim = vw > 0 && vw % s.kvHeads == 0 ? vw / s.kvHeads : -1;
  if (o.c.docStart) {
    if (o.c.docTokens != s.batch * s.seq)
      return opError(k, "the document starts cover " +
                            std::to_string(o.c.docTokens) +
                            " tokens, the attention " +
                            std::to_string(s.batch * s.seq));
    s.docStart = o.c.docStart;
  }
  if (!isValid(s) || lastDim(kk) != s.kvHeads * s.headDim)
    return opError(k, "invalid attention shape");
  return Status::ok();
}

Status concatHeadsShape(const Kernel &k, const Operands &o, bool bwd,
                        ConcatHeadsShape &s) {
  s.heads = attrInt(k, "num_heads", 0);
  s.broadcast = attrFlag(k, "broadcast");
  if (s.heads <= 0)
    return opError(k, "num_heads must be positive");
  const int64_t w0 = lastDim(o.t(0));
  s.rows = w0 > 0 ? numel(o.t(0)) / w0 : 0;
  if (bwd) {
    s.lhsDim = attrInt(k, "lhs_head_dim", 0);
    s.rhsDim = w0 / s.heads - s.lhsDim;
  } else {
    s.lhsDim = w0 / s.heads;
    s.rhsDim = lastDim(o.t(1)) / s.rhsHeads();
  }
  if (!isValid(s))
    return opError(k, "invalid concat_heads shape");
  return Status::ok();
}

Status moeShape(const Kernel &k, const Operands &o, MoEShape &s) {
  const TensorType *x = o.t(0), *w1 = o.t(2);
  if (!x || !w1 || w1->shape.size() != 3)
    return opError(k, "bad moe operand shapes");
  s.hidden = lastDim(x);
  s.tokens = s.hidden ? x->numElements() / s.hidden : 0;
  s.experts = w1->shape[0];
  s.ffn = w1->shape[1];
  s.topK = attrInt(k, "top_k", 1);
  s.capacity =
      moeCapacity(attrFloat(k, "capacity_factor"), s.tokens, s.topK, s.experts);
  std::string act = attrStr(k, "activation");
  if (act == "gelu")
    s.act = Activation::Gelu;
  else if (act == "silu")
    s.act = Activation::Silu;
  else
    return opError(k, "unknown activation '" + act + "'");
  if (Status st = moeRouting(k, s); !st)
    return st;
  if (!isValid(s))
    return opError(k, "invalid moe shape");
  return Status::ok();
}

Status moeRouting(const Kernel &k, MoEShape &s) {
  std::string scoring = attrStr(k, "scoring");
  if (scoring == "softmax")
    s.scoring = MoEScoring::Softmax;
  else if (scoring == "sigmoid")
    s.scoring = MoEScoring::Sigmoid;
  else
    return opError(k, "unknown scoring '" + scoring + "'");
  s.renormalize = attrFlag(k, "norm_topk_prob");
  s.scale = float(attrFloat(k, "routed_scaling_factor"));
  s.groups = attrInt(k, "n_group");
  s.topkGroup = attrInt(k, "topk_group");
  return Status::ok();
}

void moeParams(const Operands &o, bool withDy, MoEParams<float> &p,
               const float *&dy) {
  p.router = o.f(1);
  p.w1 = o.f(2);
  p.w2 = o.f(3);
  size_t n = o.nin();
  bool hasW3Slot = withDy ? n >= 6 : n >= 5;
  p.w3 = hasW3Slot ? o.f(4) : nullptr;
  p.bias = o.c.moeBias;
  dy = withDy ? o.f(n - 1) : nullptr;
}

Status moeCheckBias(const Kernel &k, const KernelCall &c) {
  bool named = k.attrs.count("bias") > 0;
  if (named && !c.moeBias)
    return opError(k, "names the bias '" + attrStr(k, "bias", "") +
                          "' but the call has none");
  if (!named && (c.moeBias || c.moeLoad))
    return opError(k, "was given a bias but names none");
  return Status::ok();
}

void moeCountLoad(const KernelCall &c, const int32_t *topIdx, int64_t n) {
  if (!c.moeLoad)
    return;
  for (int64_t a = 0; a < n; ++a)
    c.moeLoad[topIdx[a]] += 1.0f;
}

Status moeForwardOperands(const Kernel &k, const Operands &o, MoEShape &s,
                          MoEParams<float> &p) {
  if (Status st = moeShape(k, o, s); !st)
    return st;
  if (Status st = moeCheckBias(k, o.c); !st)
    return st;
  const float *dy;
  moeParams(o, false, p, dy);
  return Status::ok();
}

Status moeGradOperands(const Kernel &k, const Operands &o, bool weight,
                       MoEShape &s, MoEParams<float> &p, const float *&dy) {
  if (Status st = moeShape(k, o, s); !st)
    return st;
  if (Status st = moeCheckBias(k, o.c); !st)
    return st;
  moeParams(o, true, p, dy);
  return Status::ok();
}

} // namespace pipeforge::rt::ops
