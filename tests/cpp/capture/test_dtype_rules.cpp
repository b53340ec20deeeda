// tests/cpp/capture/test_dtype_rules.cpp — ops.def's Dtype column against ATen.
//
// Every row with a dtype rule (pointwise and reduction ops) is called through ATen's dispatcher
// once per input dtype, with arguments made from its schema (tensors of that dtype; a bool tensor
// where the schema names a condition or mask; numbers of the dtype's kind, so the common dtype is
// the tensor's). The rule, applied by `result_dtype` as the binders apply it, must give ATen's
// result dtype where ATen computes, and an error where ATen refuses. In-place rows must carry their
// twin's rule.
#include "codegen/capture/meta_rules.h"
#include "codegen/graph/graph.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <set>
#include <string>

namespace fastdyn::codegen {
namespace {

using ST = c10::ScalarType;

at::Tensor sample(ST dtype) {
  if (dtype == ST::Bool) return at::randint(0, 2, {6, 8}).to(dtype);
  if (c10::isIntegralType(dtype, false)) return at::randint(1, 6, {6, 8}).to(dtype);
  return (at::randn({6, 8}) + 0.25).to(dtype);
}

// A value for schema argument `a` with tensors of `dtype`; nullopt when there is none to make.
std::optional<c10::IValue> argument(const c10::Argument& a, ST dtype) {
  const c10::TypePtr& t = a.real_type();
  const c10::TypeKind k = t->kind();
  const bool is_mask = a.name() == "condition" || a.name() == "mask";
  if (k == c10::TypeKind::TensorType) {
    if (a.name() == "value") return c10::IValue(sample(dtype).select(0, 0).select(0, 0));  // masked_fill: 0-dim
    return c10::IValue(sample(is_mask ? ST::Bool : dtype));
  }
  if (k == c10::TypeKind::NumberType) {
    if (dtype == ST::Bool) return c10::IValue(true);
    if (c10::isIntegralType(dtype, false)) return c10::IValue(int64_t{2});
    return c10::IValue(2.0);
  }
  if (k == c10::TypeKind::OptionalType) {
    const c10::TypeKind inner = t->containedType(0)->kind();
    // A bound or a rounding mode gets a value: the binders record these ops with one.
    if (inner == c10::TypeKind::TensorType || inner == c10::TypeKind::NumberType)
      return argument(c10::Argument(a.name(), t->containedType(0)), dtype);
    if (inner == c10::TypeKind::StringType) return c10::IValue(std::string("floor"));
    if (a.default_value()) return *a.default_value();
    return c10::IValue();
  }
  if (a.default_value()) return *a.default_value();
  switch (k) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return c10::IValue(int64_t{1});
    case c10::TypeKind::FloatType: return c10::IValue(0.5);
    case c10::TypeKind::BoolType: return c10::IValue(false);
    case c10::TypeKind::ListType: return c10::IValue(std::vector<int64_t>{1});
    default: return std::nullopt;
  }
}

// ATen's result dtype of `op` over inputs of `dtype`, or its error; `common` is the dtype the
// binder promotes the operands to (the tensors', or with numbers only, where(cond, 2.0, 3.0), the
// wrapped numbers': bool, int64 or the default float).
struct AtenResult {
  bool ran = false;
  ST dtype = ST::Undefined;
  std::string error;
  ST common = ST::Undefined;
};
std::optional<AtenResult> run_aten(OpId op, ST dtype) {
  const OpInfo& info = op_info(op);
  auto handle = c10::Dispatcher::singleton().findSchema({std::string("aten::") + info.aten, info.overload});
  if (!handle) return std::nullopt;
  torch::jit::Stack stack;
  AtenResult r;
  r.common = dtype == ST::Bool ? ST::Bool : c10::isIntegralType(dtype, false) ? ST::Long : ST::Float;
  for (const c10::Argument& a : handle->schema().arguments()) {
    auto v = argument(a, dtype);
    if (!v) return std::nullopt;
    if (v->isTensor() && a.name() != "condition" && a.name() != "mask") r.common = dtype;
    stack.push_back(*v);
  }
  try {
    handle->callBoxed(stack);
  } catch (const std::exception& e) {
    r.error = e.what();
    r.error = r.error.substr(0, r.error.find('\n'));
    return r;
  }
  r.ran = true;
  r.dtype = stack.at(0).toTensor().scalar_type();
  return r;
}

// Rows where ATen refuses more than the dtype rule does: the binder checks the rest itself, with
// eager's message (tests/python covers those errors).
const std::set<std::string> kBinderChecksMore = {
    "sub_Tensor", "sub_Scalar", "rsub_Scalar",  // any bool operand: "use ~ or logical_not()"
    "addcdiv",                                  // integer tensor1 and tensor2 (not an integer self)
};

TEST(DtypeColumn, EveryRuleGivesAtensResultDtypeOrRefusesAsAtenDoes) {
  const ST dtypes[] = {ST::Bool, ST::Byte, ST::Int, ST::Long, ST::Float, ST::Double, ST::BFloat16};
  int checked_rows = 0, checked_calls = 0;
  std::string skipped;
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (info.dtype == DtypeRule::Own || info.category == OpCategory::InPlace) continue;
    bool any = false;
    for (ST dtype : dtypes) {
      std::optional<AtenResult> want = run_aten(op, dtype);
      if (!want) break;
      SCOPED_TRACE(std::string(info.id) + " (" + dtype_rule_name(info.dtype) + ") on " + dtype_name(dtype));
      ST got = ST::Undefined;
      std::optional<std::string> err = result_dtype(op, info.aten, want->common, std::nullopt, ST::Float, got);
      if (want->ran) {
        EXPECT_FALSE(err.has_value()) << "ATen computes " << dtype_name(want->dtype) << ", the rule refuses: " << *err;
        if (!err) EXPECT_EQ(dtype_name(got), dtype_name(want->dtype));
      } else if (!err && !kBinderChecksMore.count(info.id)) {
        ADD_FAILURE() << "ATen refuses (" << want->error << "), the rule gives " << dtype_name(got);
      }
      any = true;
      ++checked_calls;
    }
    if (any) ++checked_rows;
    else skipped += std::string(" ") + info.id;
  }
  std::printf("dtype rules checked against ATen: %d rows, %d calls; no sample arguments for:%s\n", checked_rows,
              checked_calls, skipped.c_str());
  EXPECT_GE(checked_rows, 140);
}

TEST(DtypeColumn, PointwiseAndReductionRowsHaveARuleAndInPlaceRowsTheirTwins) {
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    SCOPED_TRACE(info.id);
    if (info.category == OpCategory::Pointwise || info.category == OpCategory::Reduction)
      EXPECT_NE(info.dtype, DtypeRule::Own);
    if (info.category == OpCategory::InPlace && info.twin != OpId::NoTwin)
      EXPECT_EQ(dtype_rule_name(info.dtype), std::string(dtype_rule_name(op_info(info.twin).dtype)));
  }
}

TEST(DtypeColumn, ADtypeArgumentDecidesWhereTheOpHasOne) {
  ST out;
  EXPECT_FALSE(result_dtype(OpId::sum_dim_IntList, "sum", ST::Int, std::nullopt, ST::Float, out));
  EXPECT_EQ(out, ST::Long);
  EXPECT_FALSE(result_dtype(OpId::sum_dim_IntList, "sum", ST::Int, ST::Short, ST::Float, out));
  EXPECT_EQ(out, ST::Short);
  EXPECT_FALSE(result_dtype(OpId::softmax_int, "softmax", ST::Long, ST::Double, ST::Float, out));
  EXPECT_EQ(out, ST::Double);
  auto err = result_dtype(OpId::mean_dim, "mean", ST::Long, std::nullopt, ST::Float, out);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("mean: could not infer output dtype"), std::string::npos) << *err;
  EXPECT_FALSE(result_dtype(OpId::exp, "exp", ST::Long, std::nullopt, ST::Double, out));
  EXPECT_EQ(out, ST::Double);  // the default dtype, not float32
}

}  // namespace
}  // namespace fastdyn::codegen
