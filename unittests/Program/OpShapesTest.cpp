//===- OpShapesTest.cpp - The op registry (rt/OpShapes.h) -----------------===//
//
// The registry's order and attribute declarations; every op of the table
// with a good instance, then each instance broken one
// way at a time: a missing or extra operand, each operand's element type,
// each extent of each operand, each result's shape, a present / absent
// optional result. Every break must be refused, and the error must point at
// the operand or result at fault where there is one.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/OpShapes.h"

#include <gtest/gtest.h>

#include <set>

using namespace pipeforge::rt;

namespace {

TensorType f32(std::vector<int64_t> s) { return {DType::F32, std::move(s)}; }
TensorType i32(std::vector<int64_t> s) { return {DType::I32, std::move(s)}; }

struct Instance {
  std::string op;
  std::vector<std::optional<TensorType>> in, out; // nullopt: -1 in the file
  AttrMap attrs;
  /// (operand, dim) extents nothing constrains (a vocabulary, a count of
  /// positions >= seq): changing them alone is fine.
  std::set<std::pair<size_t, size_t>> free;
};

const TensorType X = f32({2, 4, 3});

/// A valid instance of every op in the table.
std::vector<Instance> goodInstances() {
  TensorType tok = i32({2, 4}), w = f32({5, 3}), g = f32({3});
  TensorType q = f32({2, 4, 8}), kv = f32({2, 4, 4});
  TensorType r = f32({4, 3}), w1 = f32({4, 6, 3}), w2 = f32({4, 3, 6});
  TensorType logits = f32({2, 4, 8}), scalar = f32({});
  AttrMap eps{{"epsilon", 1e-5}};
  AttrMap attn{{"num_heads", int64_t(2)},
               {"num_kv_heads", int64_t(1)},
               {"rotary", true}};
  AttrMap mlaAttn{{"num_heads", int64_t(2)},
                  {"num_kv_heads", int64_t(2)},
                  {"rotary", true},
                  {"rope_dim", int64_t(2)}};
  AttrMap concat{{"num_heads", int64_t(2)}, {"broadcast", true}};
  AttrMap perHead{{"num_heads", int64_t(2)}};
  AttrMap concatBwd{{"num_heads", int64_t(2)},
                    {"broadcast", true},
                    {"lhs_head_dim", int64_t(4)}};
  AttrMap tp{{"tp", int64_t(2)}};
  AttrMap tpDim{{"tp", int64_t(2)}, {"dim", int64_t(1)}};
  AttrMap moe{{"top_k", int64_t(2)},
              {"capacity_factor", 1.25},
              {"activation", std::string("silu")}};
  return {
      {"linear", {X, w, f32({5})}, {f32({2, 4, 5})}, {}, {}},
      {"layernorm", {X, g, g}, {X}, eps, {}},
      {"rmsnorm", {X, g}, {X}, eps, {}},
      {"gelu", {X}, {X}, {}, {}},
      {"silu", {X}, {X}, {}, {}},
      {"add", {X, X}, {X}, {}, {}},
      {"mul", {X, X}, {X}, {}, {}},
      {"embedding", {tok, f32({8, 3}), f32({6, 3})}, {X}, {}, {{1, 0}, {2, 0}}},
      {"attention", {q, kv, kv}, {q}, attn, {}},
      {"moe", {X, r, w1, w2, w1}, {X}, moe, {}},
      {"cross_entropy", {logits, tok}, {scalar}, {}, {{0, 2}}},
      {"linear_bwd_input", {f32({2, 4, 5}), w}, {X}, {}, {}},
      {"linear_bwd_weight",
       {X, f32({2, 4, 5})},
       {w, f32({5})},
       {{"has_bias", true}},
       {}},
      {"layernorm_bwd_input", {X, g, X}, {X}, eps, {}},
      {"layernorm_bwd_weight", {X, X}, {g, g}, eps, {}},
      {"rmsnorm_bwd_input", {X, g, X}, {X}, eps, {}},
      {"rmsnorm_bwd_weight", {X, X}, {g}, eps, {}},
      {"gelu_bwd", {X, X}, {X}, {}, {}},
      {"silu_bwd", {X, X}, {X}, {}, {}},
      {"embedding_bwd_weight",
       {tok, X},
       {f32({8, 3}), f32({6, 3})},
       {{"vocab", int64_t(8)}, {"max_positions", int64_t(6)}},
       {}},
      {"attention_bwd", {q, kv, kv, q}, {q, kv, kv}, attn, {}},
      {"moe_bwd_input", {X, r, w1, w2, w1, X}, {X}, moe, {}},
      {"moe_bwd_weight", {X, r, w1, w2, w1, X}, {r, w1, w2, w1}, moe, {}},
      {"cross_entropy_bwd", {logits, tok, scalar}, {logits}, {}, {}},
      {"tp_copy", {X}, {X}, tp, {}},
      {"tp_all_reduce", {X}, {X}, tp, {}},
      {"tp_all_gather", {X}, {f32({2, 8, 3})}, tpDim, {}},
      {"tp_reduce_scatter", {X}, {f32({2, 2, 3})}, tpDim, {}},
      {"vocab_parallel_cross_entropy", {logits, tok}, {scalar}, tp, {{0, 2}}},
      {"vocab_parallel_cross_entropy_bwd",
       {logits, tok, scalar},
       {logits},
       tp,
       {}},
      {"dropout", {X}, {X}, {{"rate", 0.1}, {"site", int64_t(3)}}, {}},
      // MLA: value heads of 2, RoPE on the last 2 of each 6-wide q/k head.
      {"attention",
       {f32({2, 4, 12}), f32({2, 4, 12}), f32({2, 4, 4})},
       {f32({2, 4, 4})},
       mlaAttn,
       {}},
      {"concat_heads",
       {f32({2, 4, 8}), f32({2, 4, 3})},
       {f32({2, 4, 14})},
       concat,
       {}},
      {"concat_heads", {f32({4, 8}), f32({4, 6})}, {f32({4, 14})}, perHead, {}},
      {"attention_bwd",
       {f32({2, 4, 12}), f32({2, 4, 12}), f32({2, 4, 4}), f32({2, 4, 4})},
       {f32({2, 4, 12}), f32({2, 4, 12}), f32({2, 4, 4})},
       mlaAttn,
       {}},
      {"concat_heads_bwd",
       {f32({2, 4, 14})},
       {f32({2, 4, 8}), f32({2, 4, 3})},
       concatBwd,
       {}},
  };
}

OpShapeResult check(const Instance &c) {
  const OpSpec *spec = lookupOpSpec(c.op);
  EXPECT_NE(spec, nullptr) << c.op;
  auto ptrs = [](const std::vector<std::optional<TensorType>> &v) {
    std::vector<const TensorType *> p;
    for (const auto &t : v)
      p.push_back(t ? &*t : nullptr);
    return p;
  };
  return checkKernelTypes(*spec, ptrs(c.in), ptrs(c.out), c.attrs);
}

#define EXPECT_CONTAINS(hay, needle)                                           \
  EXPECT_NE(std::string(hay).find(needle), std::string::npos)                  \
      << "expected \"" << (needle) << "\" in: " << (hay)

TEST(OpShapes, EveryOpHasAGoodInstanceThatPasses) {
  std::set<std::string> covered;
  for (const Instance &c : goodInstances()) {
    OpShapeResult r = check(c);
    EXPECT_TRUE(r) << c.op << ": " << r.error;
    EXPECT_LE(r.workspaceElements, kMaxElements) << c.op;
    covered.insert(c.op);
  }
  for (const OpSpec &s : allOpSpecs()) {
    // zeros has no shape function (ZerosTakeTheProgramsType below).
    EXPECT_TRUE(covered.count(s.name) || !s.infer)
        << s.name << " has no test instance";
    // At most one optional operand and one optional result: mapSlots relies
    // on it to place an omitted optional (the MLIR convention).
    size_t optIn = 0, optOut = 0;
    for (const OpOperandSpec &o : s.operands)
      optIn += o.optional;
    for (const OpOperandSpec &o : s.results)
      optOut += o.optional;
    EXPECT_LE(optIn, 1u) << s.name;
    EXPECT_LE(optOut, 1u) << s.name;
  }
  EXPECT_EQ(lookupOpSpec("frobnicate"), nullptr);
  EXPECT_EQ(lookupOpSpec(""), nullptr);
}

// The registry: one entry per OpKind, in the enum's order, which is the
// byte order of the mnemonics (lookups by name are binary searches).
TEST(OpRegistry, OneEntryPerKindInNameOrder) {
  const std::vector<OpSpec> &all = allOpSpecs();
  ASSERT_EQ(all.size(), kNumOpKinds);
  for (size_t i = 0; i < all.size(); ++i) {
    OpKind k = OpKind(i);
    EXPECT_EQ(all[i].kind, k) << all[i].name;
    EXPECT_EQ(&opSpec(k), &all[i]);
    EXPECT_STREQ(opName(k), all[i].name);
    EXPECT_EQ(lookupOpKind(all[i].name), k);
    EXPECT_EQ(lookupOpSpec(all[i].name), &all[i]);
    if (i) {
      EXPECT_LT(std::string(all[i - 1].name), std::string(all[i].name));
    }
  }
  EXPECT_EQ(lookupOpKind("frobnicate"), OpKind::Unknown);
  EXPECT_EQ(lookupOpKind("nn.linear"), OpKind::Unknown);
  EXPECT_STREQ(opName(OpKind::Unknown), "?");
  EXPECT_EQ(opSpec(OpKind::LinearBwdWeight).name,
            std::string("linear_bwd_weight"));
  EXPECT_TRUE(opSpec(OpKind::TPAllGather).collective);
  EXPECT_FALSE(opSpec(OpKind::Linear).collective);
}

// Attributes are declared once, with the ODS's use and default
// (NNOpRegistryTest compares them with the ODS): a declared value has the
// declared type; a required attribute has none.
TEST(OpRegistry, AttributeDeclarations) {
  for (const OpSpec &s : allOpSpecs()) {
    std::set<std::string> names;
    for (const OpAttrSpec &a : s.attrs) {
      EXPECT_TRUE(names.insert(a.name).second) << s.name << " " << a.name;
      EXPECT_EQ(s.attr(a.name), &a);
      if (a.use == OpAttrSpec::Required) {
        EXPECT_FALSE(a.value) << s.name << " " << a.name;
      }
      if (a.use == OpAttrSpec::Default) {
        EXPECT_TRUE(a.value) << s.name << " " << a.name;
      }
      if (!a.value)
        continue;
      const AttrValue &v = *a.value;
      switch (a.type) {
      case AttrType::Int:
        EXPECT_TRUE(std::holds_alternative<int64_t>(v)) << a.name;
        break;
      case AttrType::Real:
        EXPECT_TRUE(std::holds_alternative<double>(v)) << a.name;
        break;
      case AttrType::Flag:
        EXPECT_TRUE(std::holds_alternative<bool>(v)) << a.name;
        break;
      case AttrType::Text:
        EXPECT_TRUE(std::holds_alternative<std::string>(v)) << a.name;
        break;
      }
    }
    EXPECT_EQ(s.attr("no_such_attribute"), nullptr);
  }
}

// An absent attribute takes the declared default; a required one is an
// error naming it.
TEST(OpRegistry, AbsentAttributes) {
  TensorType x = f32({2, 4, 3}), g = f32({3});
  EXPECT_TRUE(checkKernelTypes(opSpec(OpKind::RMSNorm), {&x, &g}, {&x}, {}));
  OpShapeResult r = checkKernelTypes(opSpec(OpKind::Dropout), {&x}, {&x},
                                     {{"site", int64_t(0)}});
  EXPECT_FALSE(r);
  EXPECT_CONTAINS(r.error, "expects the number attribute 'rate'");
  r = checkKernelTypes(opSpec(OpKind::Dropout), {&x}, {&x}, {{"rate", 0.1}});
  EXPECT_CONTAINS(r.error, "expects the integer attribute 'site'");
  TensorType q = f32({2, 4, 8});
  r = checkKernelTypes(opSpec(OpKind::Attention), {&q, &q, &q}, {&q},
                       {{"num_kv_heads", int64_t(2)}});
  EXPECT_CONTAINS(r.error, "expects the integer attribute 'num_heads'");
}

TEST(OpShapes, ZerosTakeTheProgramsType) {
  const OpSpec *z = lookupOpSpec("zeros");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->infer, nullptr);
  TensorType a = f32({2, 4, 3}), b = f32({7}), i = {DType::I32, {7}};
  EXPECT_TRUE(checkKernelTypes(*z, {}, {&a}, {}));
  EXPECT_TRUE(checkKernelTypes(*z, {}, {&b}, {}));
  EXPECT_FALSE(checkKernelTypes(*z, {}, {&i}, {}));   // f32 only
  EXPECT_FALSE(checkKernelTypes(*z, {&a}, {&a}, {})); // no operands
  EXPECT_FALSE(checkKernelTypes(*z, {}, {}, {}));     // one result
}

TEST(OpShapes, MissingOrExtraOperand) {
  for (const Instance &good : goodInstances()) {
    const OpSpec &spec = *lookupOpSpec(good.op);
    for (size_t i = 0; i < good.in.size(); ++i) {
      if (spec.operands[i].optional)
        continue;
      Instance c = good;
      c.in[i].reset();
      OpShapeResult r = check(c);
      EXPECT_FALSE(r) << good.op << " without operand " << i;
      EXPECT_EQ(r.operand, int(i)) << good.op << ": " << r.error;
    }
    Instance c = good;
    c.in.push_back(X);
    EXPECT_FALSE(check(c)) << good.op << " with an extra operand";
    c = good;
    c.in.resize(good.in.size() - 2 + (good.in.size() == 1));
    EXPECT_FALSE(check(c)) << good.op << " with too few operands";
    c = good;
    c.out.push_back(X);
    EXPECT_FALSE(check(c)) << good.op << " with an extra result";
  }
}

TEST(OpShapes, WrongElementType) {
  for (const Instance &good : goodInstances())
    for (size_t i = 0; i < good.in.size(); ++i) {
      Instance c = good;
      c.in[i]->dtype = c.in[i]->dtype == DType::F32 ? DType::I32 : DType::F32;
      OpShapeResult r = check(c);
      EXPECT_FALSE(r) << good.op << " operand " << i;
      EXPECT_EQ(r.operand, int(i)) << good.op << ": " << r.error;
      EXPECT_CONTAINS(r.error, "element type");
    }
}

TEST(OpShapes, EveryExtentOfEveryOperandMatters) {
  for (const Instance &good : goodInstances())
    for (size_t i = 0; i < good.in.size(); ++i)
      for (size_t d = 0; d < good.in[i]->shape.size(); ++d) {
        Instance c = good;
        c.in[i]->shape[d] += 1;
        bool free = good.free.count({i, d}) != 0;
        OpShapeResult r = check(c);
        EXPECT_EQ(bool(r), free)
            << good.op << " operand " << i << " dim " << d << ": " << r.error;
      }
}

TEST(OpShapes, WrongResultShapeOrDType) {
  for (const Instance &good : goodInstances())
    for (size_t i = 0; i < good.out.size(); ++i) {
      Instance c = good;
      c.out[i]->shape.push_back(1);
      OpShapeResult r = check(c);
      EXPECT_FALSE(r) << good.op << " result " << i;
      EXPECT_EQ(r.result, int(i)) << good.op << ": " << r.error;
      c = good;
      c.out[i]->dtype = DType::I32;
      EXPECT_FALSE(check(c)) << good.op << " result " << i;
    }
}

TEST(OpShapes, OptionalResultsFollowTheirAttribute) {
  Instance c = goodInstances()[12]; // linear_bwd_weight with has_bias
  ASSERT_EQ(c.op, "linear_bwd_weight");
  c.attrs.clear(); // no bias: db must be absent
  OpShapeResult r = check(c);
  EXPECT_FALSE(r);
  EXPECT_EQ(r.result, 1);
  c.out.pop_back();
  EXPECT_TRUE(check(c)) << check(c).error;
  c.out.push_back(std::nullopt); // -1 in the file: absent too
  EXPECT_TRUE(check(c)) << check(c).error;
}

TEST(OpShapes, Messages) {
  // The reproductions: a layernorm whose gamma is a [64, 256]
  // parameter; a cross_entropy renamed linear.
  Instance ln{"layernorm",
              {f32({2, 16, 64}), f32({64, 256}), f32({64})},
              {f32({2, 16, 64})},
              {},
              {}};
  OpShapeResult r = check(ln);
  EXPECT_EQ(r.error, "expects gamma of shape [64], got [64, 256]");
  EXPECT_EQ(r.operand, 1);
  Instance ce{"linear", {f32({2, 16, 256}), i32({2, 16})}, {f32({})}, {}, {}};
  r = check(ce);
  EXPECT_EQ(r.error, "expects weight of element type f32, got i32[2x16]");
  EXPECT_EQ(r.operand, 1);
  Instance lin{
      "linear", {f32({2, 4, 3}), f32({5, 4})}, {f32({2, 4, 5})}, {}, {}};
  EXPECT_EQ(check(lin).error,
            "input features 3 do not match weight [5, 4] ([out, in])");
  lin.in = {f32({2, 4, 3}), f32({5, 3})};
  lin.out = {f32({2, 4, 4})};
  r = check(lin);
  EXPECT_EQ(r.error, "result is f32[2x4x4], expected f32[2x4x5]");
  EXPECT_EQ(r.result, 0);
  lin.in.push_back(f32({5}));
  lin.in.push_back(f32({5}));
  EXPECT_EQ(check(lin).error,
            "operands: expects 2 to 3 (input, weight, bias?), got 4");
  Instance attn{"attention",
                {f32({2, 4, 8}), f32({2, 4, 8}), f32({2, 4, 8})},
                {f32({2, 4, 8})},
                {{"num_heads", int64_t(2)}},
                {}};
  EXPECT_EQ(check(attn).error, "expects the integer attribute 'num_kv_heads'");
}

/// nn.moe's routing attributes as a program carries them (the MLIR side's
/// messages are tested in test/Dialect/NN/moe-routing-invalid.mlir).
TEST(OpShapes, MoERoutingAttributes) {
  TensorType r = f32({8, 3}), w1 = f32({8, 6, 3}), w2 = f32({8, 3, 6});
  Instance moe{"moe",
               {X, r, w1, w2},
               {X},
               {{"top_k", int64_t(3)},
                {"scoring", std::string("sigmoid")},
                {"norm_topk_prob", false},
                {"routed_scaling_factor", 2.5},
                {"n_group", int64_t(4)},
                {"topk_group", int64_t(2)}},
               {}};
  EXPECT_EQ(check(moe).error, "");
  moe.attrs["topk_group"] = int64_t(1);
  EXPECT_EQ(check(moe).error,
            "top_k 3 exceeds the 2 experts of the topk_group best groups");
  moe.attrs["topk_group"] = int64_t(2);
  moe.attrs["norm_topk_prob"] = std::string("yes");
  EXPECT_EQ(check(moe).error, "attribute 'norm_topk_prob' must be a flag");
  moe.attrs["norm_topk_prob"] = true;
  moe.attrs["n_group"] = int64_t(65);
  EXPECT_EQ(check(moe).error, "expects 1 <= n_group <= 64, got 65");
  moe.attrs["n_group"] = int64_t(4);
  moe.attrs["routed_scaling_factor"] = -1.0;
  EXPECT_EQ(check(moe).error, "expects a finite routed_scaling_factor > 0");
}

TEST(OpShapes, WorkspaceIsBounded) {
  // One sequence of 2^21 tokens and one head: [batch, heads, seq, seq]
  // probabilities are 2^42 elements, past kMaxElements, though every tensor
  // is small enough.
  TensorType q = f32({1, int64_t(1) << 21, 2});
  Instance c{"attention",
             {q, q, q},
             {q},
             {{"num_heads", int64_t(1)}, {"num_kv_heads", int64_t(1)}},
             {}};
  OpShapeResult r = check(c);
  EXPECT_FALSE(r);
  EXPECT_CONTAINS(r.error, "scratch memory");
}

TEST(OpShapes, DynamicExtentsAgreeWithEverything) {
  // The verifiers' view: an unknown extent is no error, and results keep it.
  const OpSpec &spec = *lookupOpSpec("linear");
  AttrMap none;
  TensorType x = f32({kDynamicDim, 3}), w = f32({5, kDynamicDim});
  OpShapeInput in{{&x, &w, nullptr}, none};
  OpShapeResult r = inferOpShapes(spec, in);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.results[0]->shape, (std::vector<int64_t>{kDynamicDim, 5}));
  EXPECT_EQ(shapeString(r.results[0]->shape), "[?, 5]");
}

} // namespace
