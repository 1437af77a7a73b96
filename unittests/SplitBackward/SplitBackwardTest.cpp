//===- SplitBackwardTest.cpp - B then W computes what BW computes ---------===//
//
// Runs --pp-split-backward and proves, per stage, that @backward_input
// followed by @backward_weight (W's `wstash` arguments wired to B's `wstash`
// results) computes the same expressions as the fused @backward: every
// result of each is hashed structurally (op name, attributes, types, operand
// expressions; arguments by their pp.role and id) and compared. Also checks
// the signature convention the runtime wires buffers by.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"

#include "llvm/ADT/Hashing.h"

#include <functional>
#include <gtest/gtest.h>
#include <map>

using namespace mlir;

namespace {

/// (pp.role, id) of argument or result attributes.
using Key = std::pair<std::string, int64_t>;

Key keyOf(DictionaryAttr attrs) {
  Key key;
  if (auto role = attrs.getAs<StringAttr>("pp.role"))
    key.first = role.str();
  for (StringRef id : {"pp.arg", "pp.result", "pp.stash", "pp.wstash"})
    if (auto i = attrs.getAs<IntegerAttr>(id))
      key.second = i.getInt();
  return key;
}

/// Structural hash of the values of one function; arguments by `argHash`.
class Hasher {
public:
  explicit Hasher(std::function<llvm::hash_code(BlockArgument)> argHash)
      : argHash(std::move(argHash)) {}
  llvm::hash_code get(Value v) {
    if (auto it = memo.find(v); it != memo.end())
      return it->second;
    llvm::hash_code h;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      h = argHash(arg);
    } else {
      auto res = cast<OpResult>(v);
      Operation *op = res.getOwner();
      h = llvm::hash_combine(op->getName().getStringRef(),
                             op->getAttrDictionary(), res.getResultNumber(),
                             v.getType());
      for (Value operand : op->getOperands())
        h = llvm::hash_combine(h, get(operand));
    }
    return memo[v] = h;
  }

private:
  std::function<llvm::hash_code(BlockArgument)> argHash;
  llvm::DenseMap<Value, llvm::hash_code> memo;
};

llvm::hash_code byKey(func::FuncOp fn, BlockArgument arg) {
  Key k = keyOf(fn.getArgAttrDict(arg.getArgNumber()));
  return llvm::hash_combine(k.first, k.second, arg.getType());
}

std::map<Key, Value> resultsByKey(func::FuncOp fn) {
  std::map<Key, Value> out;
  auto ret = cast<func::ReturnOp>(fn.front().getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    out[keyOf(fn.getResultAttrDict(i))] = v;
  return out;
}

size_t numOps(func::FuncOp fn) {
  return std::distance(fn.front().begin(), fn.front().end()) - 1;
}

/// Checks one split stage held by the symbol table `table`.
void checkStage(Operation *table, StringRef forwardName) {
  auto lookup = [&](StringRef name) {
    return dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(table, name));
  };
  func::FuncOp fwd = lookup(forwardName), b = lookup("backward_input"),
               w = lookup("backward_weight"), bw = lookup("backward");
  ASSERT_TRUE(fwd && b && w && bw);

  // Stash and parameter arguments match @forward's stash results / args.
  std::map<int64_t, Type> stashTypes;
  for (unsigned r = 0; r < fwd.getNumResults(); ++r)
    if (keyOf(fwd.getResultAttrDict(r)).first == "stash")
      stashTypes[keyOf(fwd.getResultAttrDict(r)).second] =
          fwd.getResultTypes()[r];
  for (func::FuncOp fn : {b, w, bw})
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      Key k = keyOf(fn.getArgAttrDict(i));
      if (k.first == "stash")
        EXPECT_EQ(stashTypes.at(k.second), fn.getArgumentTypes()[i]);
      else if (k.first == "param")
        EXPECT_EQ(fwd.getArgumentTypes()[k.second], fn.getArgumentTypes()[i]);
      else
        EXPECT_TRUE(k.first == "grad_in" || k.first == "loss_seed" ||
                    (fn == w && k.first == "wstash"))
            << fn.getSymName().str() << " argument role " << k.first;
    }

  // B holds no weight-gradient op; W nothing but weight-gradient work.
  b.walk([](Operation *op) {
    EXPECT_FALSE(op->getName().getStringRef().ends_with("_bwd_weight"));
  });
  w.walk([](Operation *op) {
    StringRef n = op->getName().getStringRef();
    if (!isa<func::FuncOp, func::ReturnOp>(op)) {
      EXPECT_TRUE(n.ends_with("_bwd_weight") || n == "nn.add" ||
                  n == "arith.constant")
          << n.str();
    }
  });
  EXPECT_EQ(numOps(b) + numOps(w), numOps(bw));

  // B then W == BW, result by result.
  std::map<Key, Value> bResults = resultsByKey(b), wResults = resultsByKey(w),
                       bwResults = resultsByKey(bw);
  Hasher hb([&](BlockArgument a) { return byKey(b, a); });
  Hasher hw([&](BlockArgument a) {
    Key k = keyOf(w.getArgAttrDict(a.getArgNumber()));
    if (k.first == "wstash")
      return hb.get(bResults.at(k));
    return byKey(w, a);
  });
  Hasher hbw([&](BlockArgument a) { return byKey(bw, a); });
  EXPECT_EQ(bwResults.size(),
            wResults.size() + llvm::count_if(bResults, [](auto &kv) {
              return kv.first.first == "grad_out";
            }));
  for (auto &[key, v] : bwResults) {
    SCOPED_TRACE(key.first + " " + std::to_string(key.second));
    if (key.first == "grad_out")
      EXPECT_EQ(hbw.get(v), hb.get(bResults.at(key)));
    else if (key.first == "param_grad")
      EXPECT_EQ(hbw.get(v), hw.get(wResults.at(key)));
    else
      ADD_FAILURE() << "unexpected @backward result role " << key.first;
  }
}

OwningOpRef<ModuleOp> split(MLIRContext &ctx, StringRef ir) {
  ctx.loadDialect<pipeforge::nn::NNDialect, pipeforge::pp::PPDialect,
                  func::FuncDialect, arith::ArithDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ir, &ctx);
  if (!module)
    return nullptr;
  PassManager pm(&ctx);
  pm.addPass(pipeforge::pp::createPPSplitBackward());
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

constexpr const char *kEveryOp = R"mlir(
func.func @model(%tok: tensor<2x8xi32> {nn.role = "tokens"},
                 %tgt: tensor<2x8xi32> {nn.role = "targets"},
                 %wte: tensor<32x16xf32> {nn.role = "param"},
                 %wpe: tensor<8x16xf32> {nn.role = "param"},
                 %g1: tensor<16xf32> {nn.role = "param"},
                 %b1: tensor<16xf32> {nn.role = "param"},
                 %wq: tensor<16x16xf32> {nn.role = "param"},
                 %wk: tensor<8x16xf32> {nn.role = "param"},
                 %g2: tensor<16xf32> {nn.role = "param"},
                 %r: tensor<4x16xf32> {nn.role = "param"},
                 %e1: tensor<4x32x16xf32> {nn.role = "param"},
                 %e2: tensor<4x16x32xf32> {nn.role = "param"},
                 %e3: tensor<4x32x16xf32> {nn.role = "param"},
                 %wg: tensor<16x16xf32> {nn.role = "param"}) -> tensor<f32> {
  %h = nn.embedding %tok, %wte, %wpe : (tensor<2x8xi32>, tensor<32x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  %n = nn.layernorm %h, %g1, %b1 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %q = nn.linear %n, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %k = nn.linear %n, %wk : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x8xf32>
  %o = nn.attention %q, %k, %k {num_heads = 2 : i64, num_kv_heads = 1 : i64, rotary}
      : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
  %r1 = nn.add %h, %o : tensor<2x8x16xf32>
  %m = nn.rmsnorm %r1, %g2 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %y = nn.moe %m, %r, %e1, %e2, %e3 {top_k = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<4x32x16xf32>) -> tensor<2x8x16xf32>
  %gl = nn.linear %y, %wg : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %s = nn.silu %gl : tensor<2x8x16xf32>
  %g = nn.gelu %s : tensor<2x8x16xf32>
  %p = nn.mul %g, %y : tensor<2x8x16xf32>
  %logits = nn.linear %p, %wte : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  %loss = nn.cross_entropy %logits, %tgt : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
)mlir";

constexpr const char *kPipeline = R"mlir(
pp.pipeline @mlp stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>, %g: tensor<8xf32> {nn.role = "param"},
                       %b: tensor<8xf32> {nn.role = "param"},
                       %w1: tensor<16x8xf32> {nn.role = "param"},
                       %b1: tensor<16xf32> {nn.role = "param"},
                       %w2: tensor<8x16xf32> {nn.role = "param"}) -> tensor<4x8xf32> {
      %n = nn.layernorm %x, %g, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      %h = nn.linear %n, %w1, %b1 : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
      %a = nn.gelu %h : tensor<4x16xf32>
      %o = nn.linear %a, %w2 : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
      %r = nn.add %x, %o : tensor<4x8xf32>
      return %r : tensor<4x8xf32>
    }
  }
  pp.stage 1 rank 1 chunk 0 {
    func.func @forward(%a: tensor<4x8xf32>, %t: tensor<4xi32> {nn.role = "targets"},
                       %w: tensor<10x8xf32> {nn.role = "param"}) -> tensor<f32> {
      %l = nn.linear %a, %w : (tensor<4x8xf32>, tensor<10x8xf32>) -> tensor<4x10xf32>
      %loss = nn.cross_entropy %l, %t : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
      return %loss : tensor<f32>
    }
  }
}
)mlir";

TEST(SplitBackward, EveryOpStandaloneBThenWEqualsBW) {
  MLIRContext ctx;
  OwningOpRef<ModuleOp> m = split(ctx, kEveryOp);
  ASSERT_TRUE(m);
  checkStage(*m, "model");
}

TEST(SplitBackward, PipelineStagesBThenWEqualBW) {
  MLIRContext ctx;
  OwningOpRef<ModuleOp> m = split(ctx, kPipeline);
  ASSERT_TRUE(m);
  int stages = 0;
  m->walk([&](pipeforge::pp::StageOp stage) {
    ++stages;
    checkStage(stage, "forward");
  });
  EXPECT_EQ(stages, 2);
}

TEST(SplitBackward, HasherSeesADifference) {
  // The structural comparison is not vacuous: B's dx and BW's dx on a
  // stage differ from W's parameter gradient.
  MLIRContext ctx;
  OwningOpRef<ModuleOp> m = split(ctx, kPipeline);
  ASSERT_TRUE(m);
  pipeforge::pp::StageOp stage;
  m->walk([&](pipeforge::pp::StageOp s) {
    if (!stage)
      stage = s;
  });
  auto bw = cast<func::FuncOp>(SymbolTable::lookupSymbolIn(stage, "backward"));
  Hasher h([&](BlockArgument a) { return byKey(bw, a); });
  std::map<Key, Value> r = resultsByKey(bw);
  EXPECT_NE(h.get(r.at({"grad_out", 0})), h.get(r.at({"param_grad", 1})));
}

} // namespace
