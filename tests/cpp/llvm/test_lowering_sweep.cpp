// tests/cpp/llvm/test_lowering_sweep.cpp — every op of ops.def that the loop IR lowers, once per
// dtype, through llvm_cpu against the aten backend, with any compiler or backend failure an error
// (what strict mode is for the Python suite).
//
// The ops come from the op table itself, not a hand-written list: for each row the ATen schema
// gives the arguments (tensors become inputs of one dtype, other arguments take their defaults or
// a plain value), ATen run on sample inputs gives the output's metadata, and the node is kept
// when lower() gives it a kernel rather than an extern call. A new lowering is swept the day it
// lands; an op whose sample arguments ATen refuses for every dtype is listed in the output.
#include "codegen/aten/aten_backend.h"
#include "codegen/graph/graph.h"
#include "codegen/llvm/backend.h"
#include "codegen/loop/passes.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace fastdyn::codegen {
namespace {

struct Sample {
  Graph graph;
  std::vector<at::Tensor> inputs;
};

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.dtype = t.scalar_type();
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  return m;
}

at::Tensor sample_tensor(c10::ScalarType dtype, int which) {
  const std::vector<int64_t> shape = which == 0 ? std::vector<int64_t>{6, 8} : std::vector<int64_t>{8};
  if (dtype == c10::ScalarType::Bool) return at::randint(0, 2, shape).to(dtype);
  // No zeros in integer inputs: integer division by zero raises in ATen and traps in a kernel.
  if (c10::isIntegralType(dtype, false)) return at::randint(1, 6, shape).to(dtype);
  return (at::randn(shape) + 0.25).to(dtype);
}

// The node's argument for schema argument `a`, and the IValue ATen is called with; nullopt when
// the sweep has no value for its type.
std::optional<std::pair<Arg, c10::IValue>> synthesize(const c10::Argument& a, c10::ScalarType dtype, Sample& s) {
  const c10::TypePtr& t = a.real_type();
  if (t->kind() == c10::TypeKind::TensorType) {
    at::Tensor x = sample_tensor(dtype, static_cast<int>(s.inputs.size()));
    const ValueId v = s.graph.add_input(meta_of(x));
    s.inputs.push_back(x);
    return std::make_pair(Arg::of_value(v), c10::IValue(x));
  }
  // An optional number or tensor gets a value even where None is the default (clamp's bounds
  // are both None by default, which ATen refuses).
  if (t->kind() == c10::TypeKind::OptionalType &&
      (t->containedType(0)->kind() == c10::TypeKind::NumberType || t->containedType(0)->kind() == c10::TypeKind::TensorType))
    return synthesize(c10::Argument(a.name(), t->containedType(0)), dtype, s);
  if (a.default_value()) {
    const c10::IValue& d = *a.default_value();
    if (d.isNone()) return std::make_pair(Arg::none(), d);
    if (d.isBool()) return std::make_pair(Arg::of_bool(d.toBool()), d);
    if (d.isInt()) return std::make_pair(Arg::of_int(d.toInt()), d);
    if (d.isDouble()) return std::make_pair(Arg::of_double(d.toDouble()), d);
    if (d.isString()) return std::make_pair(Arg::of_string(d.toStringRef()), d);
    if (d.isIntList()) return std::make_pair(Arg::of_ints(d.toIntVector()), d);
    return std::nullopt;
  }
  switch (t->kind()) {
    case c10::TypeKind::NumberType:  // Scalar
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return std::make_pair(Arg::of_int(1), c10::IValue(int64_t{1}));
    case c10::TypeKind::FloatType: return std::make_pair(Arg::of_double(0.5), c10::IValue(0.5));
    case c10::TypeKind::BoolType: return std::make_pair(Arg::of_bool(false), c10::IValue(false));
    case c10::TypeKind::OptionalType: return std::make_pair(Arg::none(), c10::IValue());
    case c10::TypeKind::ListType:
      if (t->containedType(0)->kind() == c10::TypeKind::IntType || t->containedType(0)->kind() == c10::TypeKind::SymIntType)
        return std::make_pair(Arg::of_ints({1}), c10::IValue(std::vector<int64_t>{1}));
      return std::nullopt;
    default: return std::nullopt;
  }
}

// A one-node graph of `op` over inputs of `dtype`, its metadata from ATen; nullopt when the
// schema has an argument the sweep cannot make or ATen refuses these arguments.
std::optional<Sample> one_node_graph(OpId op, c10::ScalarType dtype) {
  const OpInfo& info = op_info(op);
  auto handle = c10::Dispatcher::singleton().findSchema({std::string("aten::") + info.aten, info.overload});
  if (!handle) return std::nullopt;
  const c10::FunctionSchema& schema = handle->schema();
  for (const c10::Argument& r : schema.returns())
    if (r.type()->kind() != c10::TypeKind::TensorType) return std::nullopt;
  Sample s;
  Node n;
  n.op = op;
  torch::jit::Stack stack;
  for (const c10::Argument& a : schema.arguments()) {
    if (a.alias_info() && a.alias_info()->isWrite()) return std::nullopt;  // out= and in-place forms
    auto arg = synthesize(a, dtype, s);
    if (!arg) return std::nullopt;
    n.args.push_back(arg->first);
    stack.push_back(arg->second);
  }
  try {
    handle->callBoxed(stack);
  } catch (const std::exception&) {
    return std::nullopt;  // not a valid call for this dtype or these sample arguments
  }
  for (const c10::IValue& r : stack) {
    const ValueId v = s.graph.add_value(meta_of(r.toTensor()));
    n.outputs.push_back(v);
    s.graph.outputs.push_back(v);
  }
  s.graph.nodes.push_back(n);
  return s;
}

bool lowered_to_a_kernel(const Graph& g) {
  try {
    const loop::LoweredGraph lg = loop::lower(g);
    return lg.nodes.at(0).kind != loop::NodeLowering::Kind::Extern;
  } catch (const loop::Unsupported&) {
    return false;  // a documented limit, not a failure
  }
}

TEST(LoweringSweep, EveryLoweredOpMatchesAtenForEveryDtype) {
  const c10::ScalarType dtypes[] = {c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::BFloat16,
                                    c10::ScalarType::Long, c10::ScalarType::Bool};
  int swept_ops = 0, swept_graphs = 0;
  std::string unswept;
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpCategory cat = op_info(op).category;
    if (cat != OpCategory::Pointwise && cat != OpCategory::Reduction) continue;
    bool any = false, made = false;
    for (c10::ScalarType dtype : dtypes) {
      std::optional<Sample> s = one_node_graph(op, dtype);
      if (!s) continue;
      made = true;
      if (!lowered_to_a_kernel(s->graph)) continue;
      SCOPED_TRACE(print_node(s->graph, s->graph.nodes[0]));
      std::vector<at::Tensor> want = compile_aten(s->graph)->run(s->inputs);
      std::vector<at::Tensor> got;
      try {
        got = compile_llvm_cpu(s->graph)->run(s->inputs);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "llvm_cpu failed: " << e.what();
        continue;
      }
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k].scalar_type(), want[k].scalar_type());
        EXPECT_EQ(got[k].sizes(), want[k].sizes());
        const double tol = dtype == c10::ScalarType::BFloat16 ? 2e-2 : 1e-5;
        if (got[k].is_floating_point())
          EXPECT_TRUE(at::allclose(got[k].to(at::kDouble), want[k].to(at::kDouble), tol, tol, /*equal_nan=*/true))
              << "output " << k << "\n" << got[k] << "\nwant\n" << want[k];
        else
          EXPECT_TRUE(at::equal(got[k], want[k])) << "output " << k << "\n" << got[k] << "\nwant\n" << want[k];
      }
      any = true;
      ++swept_graphs;
    }
    if (any) ++swept_ops;
    else if (!made) unswept += std::string(" ") + qualified_name(op);
  }
  std::printf("swept %d lowered ops in %d graphs; no sample arguments for:%s\n", swept_ops, swept_graphs, unswept.c_str());
  // The sweep must sweep: the table lowers well over a hundred pointwise and reduction ops.
  EXPECT_GE(swept_ops, 100);
}

}  // namespace
}  // namespace fastdyn::codegen
