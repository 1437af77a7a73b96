//===- TensorParallel.cpp - The executor's side of tensor parallelism -----===//
//
// A tensor-parallel program (--nn-shard-tensor, docs/tensor-parallel.md) is
// the same for every rank of a TP group; what differs by rank is settled
// here:
//
//   - parameters: a split one (Param::tpDim) is initialised as this rank's
//     slice of the whole tensor, so every layout starts from the numbers of
//     the single-process reference;
//   - kernels (specializeForTensorRank): the vocabulary-parallel embedding
//     and loss learn their first vocabulary entry (`vocab_start`); the
//     terms a partial sum must count once (a row-parallel linear's bias,
//     the learned positions) are dropped on every rank but rank 0; the
//     dropout masks learn where the shard lies in the whole tensor (the
//     attention's first head, a sequence shard's first position), so every
//     rank draws the single-process run's mask;
//   - the collectives (nn.tp_*) and the vocabulary-parallel loss run here,
//     on host memory, over the transport's Group::Tensor: an all-reduce
//     gives every rank the same bits (the transports sum in rank order).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "KernelOperands.h"
#include "cpu/Kernels.h"

#include <cstring>

namespace pipeforge::rt {

Program specializeForTensorRank(const Program &prog, int tpIndex) {
  Program p = prog;
  for (Stage &st : p.stages)
    for (FunctionKind fk :
         {FunctionKind::Forward, FunctionKind::BackwardInput,
          FunctionKind::BackwardWeight, FunctionKind::Backward}) {
      Function &fn = stageFunction(st, fk);
      auto rows = [&](int32_t value) -> int64_t {
        if (value < 0 || size_t(value) >= fn.values.size() ||
            fn.values[size_t(value)].shape.empty())
          return 0;
        return fn.values[size_t(value)].shape.front();
      };
      auto lastDim = [&](int32_t value) -> int64_t {
        if (value < 0 || size_t(value) >= fn.values.size() ||
            fn.values[size_t(value)].shape.empty())
          return 0;
        return fn.values[size_t(value)].shape.back();
      };
      for (Kernel &k : fn.kernels) {
        if (k.kind == OpKind::Embedding &&
            ops::attrInt(k, "vocab_shards") > 1) {
          k.attrs["vocab_start"] =
              int64_t(tpIndex) * rows(k.inputs.size() > 1 ? k.inputs[1] : -1);
          if (tpIndex != 0 && k.inputs.size() > 2)
            k.inputs[2] = -1; // positions: counted once, by rank 0
        } else if (k.kind == OpKind::EmbeddingBwdWeight &&
                   ops::attrInt(k, "vocab_shards") > 1) {
          k.attrs["vocab_start"] =
              int64_t(tpIndex) * ops::attrInt(k, "vocab", 0);
        } else if (k.kind == OpKind::Linear && k.attrs.count("partial") &&
                   tpIndex != 0 && k.inputs.size() > 2) {
          k.inputs[2] = -1; // bias: counted once, by rank 0
        } else if (k.kind == OpKind::VocabParallelCrossEntropy ||
                   k.kind == OpKind::VocabParallelCrossEntropyBwd) {
          k.attrs["vocab_start"] =
              int64_t(tpIndex) * lastDim(k.inputs.empty() ? -1 : k.inputs[0]);
        } else if (k.kind == OpKind::Attention ||
                   k.kind == OpKind::AttentionBwd) {
          // Heads are split: the dropout draws the whole model's head.
          k.attrs["head_start"] =
              int64_t(tpIndex) * ops::attrInt(k, "num_heads", 0);
        } else if (k.kind == OpKind::Dropout) {
          // On a sequence shard (sequence parallelism): its first position.
          int32_t in = k.inputs[0];
          if (in >= 0 && size_t(in) < fn.values.size() &&
              fn.values[size_t(in)].shape.size() == 3) {
            int64_t seq = fn.values[size_t(in)].shape[1];
            if (seq < prog.model.seqLen)
              k.attrs["seq_start"] = int64_t(tpIndex) * seq;
          }
        }
      }
    }
  return p;
}

void sliceTensorParallel(const Param &p, int T, int tpIndex, const float *whole,
                         float *out) {
  const std::vector<int64_t> &shape = p.type.shape;
  size_t d = size_t(p.tpDim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i)
    outer *= shape[i];
  for (size_t i = d + 1; i < shape.size(); ++i)
    inner *= shape[i];
  int64_t n = shape[d]; // this rank's extent
  int64_t block = n * inner;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out + o * block, whole + (o * T + tpIndex) * block,
                size_t(block) * 4);
}

namespace {
int64_t numel(const TensorType *t) { return t ? t->numElements() : 0; }
} // namespace

Expected<TPSlices> tpSlices(const KernelCall &c, int T) {
  const Kernel &k = *c.kernel;
  const bool gather = k.kind == OpKind::TPAllGather;
  const TensorType *whole = gather ? c.outTypes[0] : c.inTypes[0];
  const TensorType *shardT = gather ? c.inTypes[0] : c.outTypes[0];
  const int64_t dim = ops::attrInt(k, "dim", 0);
  int64_t outer = 1, extent = 1, inner = 1;
  for (size_t i = 0; i < whole->shape.size(); ++i)
    (int64_t(i) < dim ? outer : int64_t(i) == dim ? extent : inner) *=
        whole->shape[i];
  if (T < 1 || extent % T)
    return Status::error("kernel '" + k.op + "': dimension " +
                         std::to_string(dim) + " (" + std::to_string(extent) +
                         ") does not split over " + std::to_string(T) +
                         " ranks");
  TPSlices l;
  l.T = T;
  l.outer = outer;
  l.shard = extent / T * inner;
  l.part = outer * l.shard;
  if (shardT->numElements() != l.part)
    return Status::error("kernel '" + k.op + "': the shard has " +
                         std::to_string(shardT->numElements()) +
                         " elements, expected " + std::to_string(l.part));
  return l;
}

/// One TP kernel on host buffers (`c` points at host memory). Its operands
/// are the validated ones (rt/OpShapes.h): input, result, and for the loss
/// the targets with the logits' leading shape (and loss_grad for its B).
Status runTensorParallelKernel(const KernelCall &c, Transport &tr) {
  const Kernel &k = *c.kernel;
  const int T = tr.tpSize();
  auto err = [&](const std::string &m) {
    return Status::error("kernel '" + k.op + "': " + m);
  };
  if (T < 2)
    return err("the job has no tensor-parallel group (the program was "
               "compiled with --tp; run it with tensor_parallel ranks)");
  const float *x = static_cast<const float *>(c.in[0]);
  float *y = static_cast<float *>(c.out[0]);
  const int64_t n = numel(c.inTypes[0]);

  switch (k.kind) {
  case OpKind::TPCopy:
  case OpKind::TPAllReduce:
    if (y != x)
      std::memcpy(y, x, size_t(n) * 4);
    if (k.kind == OpKind::TPCopy)
      return Status::ok();
    return tr.allreduce(y, n, Group::Tensor);

  case OpKind::TPAllGather:
  case OpKind::TPReduceScatter: {
    auto l = tpSlices(c, T);
    if (!l)
      return l.status();
    // Member-major on the host, then into the tensor's layout (gather), or
    // the other way (scatter).
    std::vector<float> mm(size_t(T * l->part));
    if (k.kind == OpKind::TPAllGather) {
      if (Status s = tr.allGatherHost(x, mm.data(), l->part, Group::Tensor);
          !s)
        return s;
      for (int r = 0; r < T; ++r)
        for (int64_t o = 0; o < l->outer; ++o)
          std::memcpy(y + l->inWhole(r, o), mm.data() + l->inMembers(r, o),
                      size_t(l->shard) * 4);
      return Status::ok();
    }
    for (int r = 0; r < T; ++r)
      for (int64_t o = 0; o < l->outer; ++o)
        std::memcpy(mm.data() + l->inMembers(r, o), x + l->inWhole(r, o),
                    size_t(l->shard) * 4);
    return tr.reduceScatterHost(mm.data(), y, l->part, Group::Tensor);
  }

  case OpKind::VocabParallelCrossEntropy:
  case OpKind::VocabParallelCrossEntropyBwd: {
    const TensorType &lt = *c.inTypes[0];
    int64_t V = lt.shape.back();
    int64_t tokens = V ? n / V : 0;
    const int32_t *targets = static_cast<const int32_t *>(c.in[1]);
    int64_t start = ops::attrInt(k, "vocab_start", 0);
    int64_t whole = V * T;
    for (int64_t i = 0; i < tokens; ++i)
      if (targets[i] < 0 || targets[i] >= whole)
        return err("target " + std::to_string(targets[i]) + " at token " +
                   std::to_string(i) + " is outside the vocabulary of " +
                   std::to_string(whole));
    std::vector<float> m(static_cast<size_t>(tokens)),
        stats(static_cast<size_t>(2 * tokens));
    cpu::vocabShardMax(tokens, V, x, m.data());
    if (Status s = tr.allreduce(m.data(), tokens, Group::Tensor, ReduceOp::Max);
        !s)
      return s;
    cpu::vocabShardStats(tokens, V, start, x, targets, m.data(), stats.data());
    if (Status s = tr.allreduce(stats.data(), 2 * tokens, Group::Tensor); !s)
      return s;
    if (k.kind == OpKind::VocabParallelCrossEntropy) {
      *y = cpu::vocabParallelLoss(tokens, m.data(), stats.data());
      return Status::ok();
    }
    float dloss = *static_cast<const float *>(c.in[2]);
    cpu::vocabParallelLossBwd(tokens, V, start, x, targets, m.data(),
                              stats.data(), dloss, y);
    return Status::ok();
  }

  default:
    return err("not a tensor-parallel op");
  }
}

} // namespace pipeforge::rt
