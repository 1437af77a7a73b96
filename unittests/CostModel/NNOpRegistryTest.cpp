//===- NNOpRegistryTest.cpp - The nn dialect's ODS and the op registry ----===//
//
// The runtime's op registry (rt/OpShapes.h, plain C++) follows the nn
// dialect's ODS definitions (NNOps.td) by hand; this test walks the nn ops
// registered in an MLIRContext and fails where the two disagree:
//   - an nn op without a registry entry, or an entry (but `zeros`, an
//     arith.constant) without an nn op;
//   - the operand and result counts: exact, or at least the required ones
//     with one optional slot (ODS Optional<>), from the ops' traits;
//   - the attribute names (the ODS arguments, getAttributeNames());
//   - the defaults of DefaultValuedAttr (what populateDefaultProperties
//     sets on a fresh op) against the registry's declared values and
//     types, and no default where the registry declares none.
// Here because CostModelTests is the suite that links the nn dialect.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/rt/OpShapes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>

using namespace mlir;
namespace rt = pipeforge::rt;

namespace {

/// What the traits of an op say about a count of operands or results.
struct Arity {
  unsigned min = 0;
  bool exact = false; ///< exactly `min`; else at least `min`
};

template <unsigned... N>
std::optional<unsigned> exactOperands(RegisteredOperationName op,
                                      std::integer_sequence<unsigned, N...>) {
  std::optional<unsigned> r;
  ((op.hasTrait<OpTrait::NOperands<N>::template Impl>() ? (void)(r = N)
                                                        : (void)0),
   ...);
  return r;
}
template <unsigned... N>
std::optional<unsigned> atLeastOperands(RegisteredOperationName op,
                                        std::integer_sequence<unsigned, N...>) {
  std::optional<unsigned> r;
  ((op.hasTrait<OpTrait::AtLeastNOperands<N>::template Impl>() ? (void)(r = N)
                                                               : (void)0),
   ...);
  return r;
}
template <unsigned... N>
std::optional<unsigned> exactResults(RegisteredOperationName op,
                                     std::integer_sequence<unsigned, N...>) {
  std::optional<unsigned> r;
  ((op.hasTrait<OpTrait::NResults<N>::template Impl>() ? (void)(r = N)
                                                       : (void)0),
   ...);
  return r;
}
template <unsigned... N>
std::optional<unsigned> atLeastResults(RegisteredOperationName op,
                                       std::integer_sequence<unsigned, N...>) {
  std::optional<unsigned> r;
  ((op.hasTrait<OpTrait::AtLeastNResults<N>::template Impl>() ? (void)(r = N)
                                                              : (void)0),
   ...);
  return r;
}

/// NOperands<N> and NResults<N> start at 2 (OneOperand, OneResult below).
using Counts = std::integer_sequence<unsigned, 2, 3, 4, 5, 6, 7, 8, 9, 10>;
using AtLeastCounts = std::make_integer_sequence<unsigned, 11>;

std::optional<Arity> operandArity(RegisteredOperationName op) {
  if (op.hasTrait<OpTrait::ZeroOperands>())
    return Arity{0, true};
  if (op.hasTrait<OpTrait::OneOperand>())
    return Arity{1, true};
  if (auto n = exactOperands(op, Counts{}))
    return Arity{*n, true};
  if (auto n = atLeastOperands(op, AtLeastCounts{}))
    return Arity{*n, false};
  return std::nullopt;
}
std::optional<Arity> resultArity(RegisteredOperationName op) {
  if (op.hasTrait<OpTrait::ZeroResults>())
    return Arity{0, true};
  if (op.hasTrait<OpTrait::OneResult>())
    return Arity{1, true};
  if (auto n = exactResults(op, Counts{}))
    return Arity{*n, true};
  if (auto n = atLeastResults(op, AtLeastCounts{}))
    return Arity{*n, false};
  return std::nullopt;
}

/// The registry's slots as an Arity: the required ones, exact unless one
/// is optional.
Arity registryArity(const std::vector<rt::OpOperandSpec> &slots) {
  Arity a;
  for (const rt::OpOperandSpec &s : slots)
    a.min += !s.optional;
  a.exact = a.min == slots.size();
  return a;
}

std::string str(const Arity &a) {
  return (a.exact ? "exactly " : "at least ") + std::to_string(a.min);
}

/// The ODS default of `attr` against the registry's declared value; empty
/// when they agree.
std::string compareDefault(const rt::OpAttrSpec &decl, Attribute ods) {
  const std::string name = decl.name;
  const bool declaresDefault = decl.use == rt::OpAttrSpec::Default;
  if (!ods)
    return declaresDefault ? name + ": the registry declares a default, the "
                                    "ODS has none"
                           : "";
  if (!declaresDefault)
    return name + ": the ODS has a default, the registry declares it " +
           (decl.use == rt::OpAttrSpec::Required ? "required" : "optional");
  const rt::AttrValue &v = *decl.value;
  switch (decl.type) {
  case rt::AttrType::Int: {
    auto i = dyn_cast<IntegerAttr>(ods);
    if (!i || isa<BoolAttr>(ods))
      return name + ": the registry declares an integer";
    return i.getValue().getSExtValue() == std::get<int64_t>(v)
               ? ""
               : name + ": default " +
                     std::to_string(i.getValue().getSExtValue()) +
                     " in the ODS, " + std::to_string(std::get<int64_t>(v)) +
                     " in the registry";
  }
  case rt::AttrType::Real: {
    auto f = dyn_cast<FloatAttr>(ods);
    if (!f)
      return name + ": the registry declares a number";
    // The ODS attributes are f32: compare at that precision.
    return float(f.getValueAsDouble()) == float(std::get<double>(v))
               ? ""
               : name + ": default " + std::to_string(f.getValueAsDouble()) +
                     " in the ODS, " + std::to_string(std::get<double>(v)) +
                     " in the registry";
  }
  case rt::AttrType::Flag: {
    auto b = dyn_cast<BoolAttr>(ods);
    if (!b)
      return name + ": the registry declares a flag";
    return b.getValue() == std::get<bool>(v) ? "" : name + ": another default";
  }
  case rt::AttrType::Text: {
    auto s = dyn_cast<StringAttr>(ods);
    if (!s)
      return name + ": the registry declares a string";
    return s.getValue() == std::get<std::string>(v)
               ? ""
               : name + ": default \"" + s.getValue().str() +
                     "\" in the ODS, \"" + std::get<std::string>(v) +
                     "\" in the registry";
  }
  }
  return "";
}

class NNOpRegistry : public ::testing::Test {
protected:
  NNOpRegistry() { ctx.loadDialect<pipeforge::nn::NNDialect>(); }

  /// The registered nn ops by mnemonic (without "nn.").
  std::vector<std::pair<std::string, RegisteredOperationName>> nnOps() {
    std::vector<std::pair<std::string, RegisteredOperationName>> r;
    for (RegisteredOperationName op : ctx.getRegisteredOperations())
      if (op.getDialectNamespace() == "nn")
        r.emplace_back(op.stripDialect().str(), op);
    return r;
  }

  MLIRContext ctx;
};

TEST_F(NNOpRegistry, SameOps) {
  std::set<std::string> ods;
  for (auto &[name, op] : nnOps()) {
    ods.insert(name);
    EXPECT_NE(rt::lookupOpSpec(name), nullptr)
        << "nn." << name << " has no entry in the op registry (OpShapes.cpp)";
  }
  EXPECT_GT(ods.size(), 30u);
  for (const rt::OpSpec &s : rt::allOpSpecs()) {
    if (s.kind == rt::OpKind::Zeros)
      continue;
    EXPECT_TRUE(ods.count(s.name))
        << "the registry's '" << s.name << "' is no nn op of the ODS";
  }
}

TEST_F(NNOpRegistry, SameOperandAndResultCounts) {
  for (auto &[name, op] : nnOps()) {
    const rt::OpSpec *spec = rt::lookupOpSpec(name);
    if (!spec)
      continue; // SameOps
    std::optional<Arity> in = operandArity(op), out = resultArity(op);
    ASSERT_TRUE(in && out) << "nn." << name << ": no count trait";
    Arity rin = registryArity(spec->operands),
          rout = registryArity(spec->results);
    EXPECT_TRUE(in->min == rin.min && in->exact == rin.exact)
        << "nn." << name << " operands: " << str(*in) << " in the ODS, "
        << str(rin) << " in the registry";
    EXPECT_TRUE(out->min == rout.min && out->exact == rout.exact)
        << "nn." << name << " results: " << str(*out) << " in the ODS, "
        << str(rout) << " in the registry";
  }
}

TEST_F(NNOpRegistry, SameAttributesAndDefaults) {
  for (auto &[name, op] : nnOps()) {
    const rt::OpSpec *spec = rt::lookupOpSpec(name);
    if (!spec)
      continue; // SameOps
    std::set<std::string> ods, reg;
    for (StringRef a : op.getAttributeNames())
      ods.insert(a.str());
    for (const rt::OpAttrSpec &a : spec->attrs)
      reg.insert(a.name);
    EXPECT_EQ(ods, reg) << "nn." << name << ": attribute names";
    // A fresh op holds the ODS defaults (populateDefaultProperties).
    Operation *fresh =
        Operation::create(OperationState(UnknownLoc::get(&ctx), op));
    for (const rt::OpAttrSpec &a : spec->attrs) {
      std::optional<Attribute> v = fresh->getInherentAttr(a.name);
      if (!v)
        continue; // not an ODS attribute: the names above
      EXPECT_EQ(compareDefault(a, *v), "") << "nn." << name;
    }
    fresh->destroy();
  }
}

} // namespace
