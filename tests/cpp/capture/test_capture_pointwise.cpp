// tests/cpp/capture/test_capture_pointwise.cpp — cross-checks the elementwise, reduction, nn and
// composite binders (codegen/capture/capture_pointwise.cpp, capture_reductions.cpp, capture_nn.cpp,
// capture_composites.cpp) against eager ATen.
//
// One harness, cases as data: each case names a family, its input tensors (dtype, sizes and a
// layout: contiguous, transposed, sliced, expanded, channels-last), its Python-level arguments
// and the eager ATen call it stands for. The harness records the call into a Graph and checks
//   (1) record_call succeeds exactly when eager does (an eager error must be a capture failure);
//   (2) every recorded output's dtype, sizes, strides and requires_grad equal eager's;
//   (3) running the graph through compile_aten gives eager's values and the same strides.
// Python numbers in eager calls are wrapped-number tensors, as Python's argument parser makes
// them, so eager promotes exactly as `x + 2.5` does.
#include "codegen/aten/aten_backend.h"
#include "codegen/capture/binder.h"
#include "runtime/errors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

namespace fastdyn::codegen {
namespace {

using ST = c10::ScalarType;
using Tensors = std::vector<at::Tensor>;

// ---- inputs -------------------------------------------------------------------------------------

enum class Layout { C, T, Sliced, Expanded, CL, Swap12, Split12 };

struct TSpec {
  ST dtype = ST::Float;
  std::vector<int64_t> sizes;
  Layout layout = Layout::C;
  bool requires_grad = false;
};

TSpec F(std::vector<int64_t> s, Layout l = Layout::C) { return {ST::Float, std::move(s), l}; }
TSpec D(std::vector<int64_t> s, Layout l = Layout::C) { return {ST::Double, std::move(s), l}; }
TSpec BF(std::vector<int64_t> s, Layout l = Layout::C) { return {ST::BFloat16, std::move(s), l}; }
TSpec L(std::vector<int64_t> s, Layout l = Layout::C) { return {ST::Long, std::move(s), l}; }
TSpec Bo(std::vector<int64_t> s, Layout l = Layout::C) { return {ST::Bool, std::move(s), l}; }
TSpec RG(TSpec t) { t.requires_grad = true; return t; }

at::Tensor values(ST dtype, at::IntArrayRef sizes) {
  if (dtype == ST::Bool) return at::randint(0, 2, sizes, at::kLong).to(at::kBool);
  if (c10::isIntegralType(dtype, false)) return at::randint(1, 6, sizes, at::kLong).to(dtype);
  return at::randn(sizes, at::kDouble).to(dtype);
}

at::Tensor make(const TSpec& s) {
  at::Tensor t;
  std::vector<int64_t> base = s.sizes;
  switch (s.layout) {
    case Layout::C: t = values(s.dtype, base); break;
    case Layout::T: {  // all dims reversed: a permuted view
      std::vector<int64_t> rev(base.rbegin(), base.rend()), perm;
      for (int64_t i = static_cast<int64_t>(base.size()) - 1; i >= 0; --i) perm.push_back(i);
      t = values(s.dtype, rev).permute(perm);
      break;
    }
    case Layout::Sliced: {  // every other element of a twice-as-long last dim, at an offset
      base.back() = base.back() * 2 + 1;
      t = values(s.dtype, base).slice(-1, 1, base.back(), 2);
      break;
    }
    case Layout::Expanded: {
      base[0] = 1;
      t = values(s.dtype, base).expand(s.sizes);
      break;
    }
    case Layout::CL: t = values(s.dtype, base).contiguous(at::MemoryFormat::ChannelsLast); break;
    case Layout::Swap12: {  // dims 1 and 2 transposed, as attention code does with heads
      std::swap(base[1], base[2]);
      t = values(s.dtype, base).transpose(1, 2);
      break;
    }
    case Layout::Split12: {  // Swap12 of the first third of a 3x wider last dim: q of a fused qkv
      std::swap(base[1], base[2]);
      base.back() *= 3;
      t = values(s.dtype, base).slice(-1, 0, s.sizes.back()).transpose(1, 2);
      break;
    }
  }
  if (s.requires_grad) {
    t = t.detach().requires_grad_(true);
  }
  return t;
}

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.dtype = t.scalar_type();
  m.device = t.device();
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.storage_offset = t.storage_offset();
  m.requires_grad = t.requires_grad();
  return m;
}

// ---- arguments ------------------------------------------------------------------------------------

// A Python-level argument: an input tensor (by index) or a constant.
struct A {
  int tensor = -1;
  CallArg c;
};
A T(int i) { A a; a.tensor = i; return a; }
A I(int64_t v) { return {-1, CallArg::of_int(v)}; }
A Dbl(double v) { return {-1, CallArg::of_double(v)}; }
A B(bool v) { return {-1, CallArg::of_bool(v)}; }
A Str(const char* s) { return {-1, CallArg::of_string(s)}; }
A None() { return {-1, CallArg::none()}; }
A Ints(std::vector<int64_t> v) { return {-1, CallArg::of_ints(std::move(v))}; }
A DT(ST t) { return {-1, CallArg::of_dtype(t)}; }

// The eager value Python would pass for an argument: a tensor, or a wrapped number (other
// constants are undefined tensors; eager lambdas index arguments by position).
at::Tensor eager_value(const A& a, const Tensors& ts) {
  if (a.tensor >= 0) return ts[a.tensor];
  at::Tensor w;
  switch (a.c.kind) {
    case CallArg::Kind::Int: w = at::scalar_tensor(a.c.i, at::kLong); break;
    case CallArg::Kind::Double: w = at::scalar_tensor(a.c.d, at::kDouble); break;
    case CallArg::Kind::Bool: w = at::scalar_tensor(a.c.b, at::kBool); break;
    default: return {};  // other constants: the eager lambda spells them itself
  }
  w.unsafeGetTensorImpl()->set_wrapped_number(true);
  return w;
}

using Eager = std::function<Tensors(const Tensors& args)>;  // args: every A as a tensor

struct Case {
  std::string name;
  Family family;
  std::vector<TSpec> inputs;
  std::vector<A> args;
  std::vector<std::pair<std::string, A>> kwargs;
  Eager eager;  // receives the positional args (tensors / wrapped numbers) in order
  bool random = false;  // values are random (dropout): compare metadata only
};

std::string describe(const TensorMeta& m) {
  std::ostringstream os;
  os << c10::toString(m.dtype) << "[";
  for (auto s : m.sizes) os << s << ",";
  os << "]{";
  for (auto s : m.strides) os << s << ",";
  os << "}+" << m.storage_offset << (m.requires_grad ? " rg" : "");
  return os.str();
}

// Returns whether the call was captured. With `allow_unsupported`, a capture failure where eager
// succeeds is accepted (random cases probe beyond the supported subset); a captured call must
// still match eager exactly.
bool run_case(const Case& k, bool allow_unsupported = false) {
  SCOPED_TRACE(k.name);
  CaptureContext ctx;
  // Eager on one set of inputs, the graph on an identical second set (in-place ops mutate).
  auto make_all = [&] {
    at::manual_seed(1234);
    Tensors ts;
    for (const auto& s : k.inputs) ts.push_back(make(s));
    return ts;
  };
  Tensors eager_in = make_all();
  Tensors eager_args;
  for (const auto& a : k.args) eager_args.push_back(eager_value(a, eager_in));
  Tensors expected;
  bool eager_ok = true;
  std::string eager_error;
  try {
    expected = k.eager(eager_args);
  } catch (const std::exception& e) {
    eager_ok = false;
    eager_error = e.what();
  }

  Graph g;
  Tensors graph_in = make_all();
  std::vector<ValueId> ids;
  for (const auto& t : graph_in) ids.push_back(g.add_input(meta_of(t)));
  auto to_call = [&](const A& a) { return a.tensor >= 0 ? CallArg::tensor(ids[a.tensor]) : a.c; };
  std::vector<CallArg> args;
  for (const auto& a : k.args) args.push_back(to_call(a));
  std::vector<std::pair<std::string, CallArg>> kwargs;
  for (const auto& kw : k.kwargs) kwargs.emplace_back(kw.first, to_call(kw.second));
  CaptureResult r = record_call(g, ctx, k.family, args, kwargs);

  if (allow_unsupported && eager_ok && !r.ok) return false;
  EXPECT_EQ(eager_ok, r.ok) << "eager: " << (eager_ok ? "ok" : eager_error.substr(0, 200))
                            << "\ncapture: " << (r.ok ? "ok" : r.reason);
  if (eager_ok != r.ok) return r.ok;
  if (!r.ok) {
    EXPECT_EQ(g.nodes.size(), 0u) << "a failed capture must leave the graph unchanged";
    EXPECT_NE(r.reason.find(family_name(k.family)), std::string::npos) << r.reason;
    return false;
  }
  EXPECT_EQ(r.values.size(), expected.size());
  if (r.values.size() != expected.size()) return true;
  for (size_t i = 0; i < expected.size(); ++i) {
    TensorMeta want = meta_of(expected[i]);
    const TensorMeta& got = g.meta(r.values[i]);
    EXPECT_EQ(got.dtype, want.dtype) << "output " << i << ": " << describe(got) << " vs eager " << describe(want);
    EXPECT_EQ(got.sizes, want.sizes) << "output " << i << ": " << describe(got) << " vs eager " << describe(want);
    EXPECT_EQ(got.strides, want.strides) << "output " << i << ": " << describe(got) << " vs eager " << describe(want);
    EXPECT_EQ(got.requires_grad, want.requires_grad) << "output " << i;
  }
  // Values through the aten backend (integer inputs are 1..5: class indices need < 6 classes).
  g.outputs = r.values;
  if (k.random) return true;
  Tensors got = compile_aten(g)->run(graph_in);
  EXPECT_EQ(got.size(), expected.size());
  if (got.size() != expected.size()) return true;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(got[i].strides().vec(), expected[i].strides().vec()) << "run output " << i;
    EXPECT_EQ(got[i].scalar_type(), expected[i].scalar_type());
    at::Tensor a = got[i].detach(), b = expected[i].detach();
    if (at::isFloatingType(b.scalar_type()))
      EXPECT_TRUE(at::allclose(a.to(at::kDouble), b.to(at::kDouble), 1e-3, 1e-4, /*equal_nan=*/true))
          << "output " << i << " values differ";
    else
      EXPECT_TRUE(at::equal(a, b)) << "output " << i << " values differ";
  }
  return true;
}

// ---- binary families ----------------------------------------------------------------------------

enum class Numbers { None, Second, Both };  // where the family accepts Python numbers

struct BinaryFamily {
  Family family;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> eager;
  Numbers numbers;
};

const std::vector<BinaryFamily>& binary_families() {
  static const std::vector<BinaryFamily> v = {
      {Family::add, [](auto& a, auto& b) { return at::add(a, b); }, Numbers::Both},
      {Family::sub, [](auto& a, auto& b) { return at::sub(a, b); }, Numbers::Both},
      {Family::mul, [](auto& a, auto& b) { return at::mul(a, b); }, Numbers::Both},
      {Family::div, [](auto& a, auto& b) { return at::div(a, b); }, Numbers::Both},
      {Family::true_divide, [](auto& a, auto& b) { return at::true_divide(a, b); }, Numbers::Both},
      // `number / x` is Tensor.__rtruediv__: reciprocal(x) * number.
      {Family::truediv,
       [](auto& a, auto& b) {
         if (a.unsafeGetTensorImpl()->is_wrapped_number()) return at::mul(at::reciprocal(b), a.item());
         return at::div(a, b);
       },
       Numbers::Both},
      {Family::floor_divide, [](auto& a, auto& b) { return at::floor_divide(a, b); }, Numbers::Both},
      {Family::remainder, [](auto& a, auto& b) { return at::remainder(a, b); }, Numbers::Both},
      {Family::fmod, [](auto& a, auto& b) { return at::fmod(a, b); }, Numbers::Second},
      // Python runs pow(number, tensor) and pow(tensor, number) through the Scalar overloads.
      {Family::pow,
       [](auto& a, auto& b) {
         if (a.unsafeGetTensorImpl()->is_wrapped_number()) return at::pow(a.item(), b);
         if (b.unsafeGetTensorImpl()->is_wrapped_number()) return at::pow(a, b.item());
         return at::pow(a, b);
       },
       Numbers::Both},
      {Family::rsub, [](auto& a, auto& b) { return at::rsub(a, b); }, Numbers::Second},
      {Family::maximum, [](auto& a, auto& b) { return at::maximum(a, b); }, Numbers::None},
      {Family::minimum, [](auto& a, auto& b) { return at::minimum(a, b); }, Numbers::None},
      {Family::atan2, [](auto& a, auto& b) { return at::atan2(a, b); }, Numbers::None},
      {Family::logical_and, [](auto& a, auto& b) { return at::logical_and(a, b); }, Numbers::None},
      {Family::logical_or, [](auto& a, auto& b) { return at::logical_or(a, b); }, Numbers::None},
      {Family::logical_xor, [](auto& a, auto& b) { return at::logical_xor(a, b); }, Numbers::None},
      {Family::eq, [](auto& a, auto& b) { return at::eq(a, b); }, Numbers::Second},
      {Family::ne, [](auto& a, auto& b) { return at::ne(a, b); }, Numbers::Second},
      {Family::lt, [](auto& a, auto& b) { return at::lt(a, b); }, Numbers::Second},
      {Family::le, [](auto& a, auto& b) { return at::le(a, b); }, Numbers::Second},
      {Family::gt, [](auto& a, auto& b) { return at::gt(a, b); }, Numbers::Second},
      {Family::ge, [](auto& a, auto& b) { return at::ge(a, b); }, Numbers::Second},
      {Family::op_eq, [](auto& a, auto& b) { return at::eq(a, b); }, Numbers::Both},
      {Family::op_ne, [](auto& a, auto& b) { return at::ne(a, b); }, Numbers::Both},
      {Family::op_lt, [](auto& a, auto& b) { return at::lt(a, b); }, Numbers::Both},
      {Family::op_le, [](auto& a, auto& b) { return at::le(a, b); }, Numbers::Both},
      {Family::op_gt, [](auto& a, auto& b) { return at::gt(a, b); }, Numbers::Both},
      {Family::op_ge, [](auto& a, auto& b) { return at::ge(a, b); }, Numbers::Both},
      {Family::bitwise_and, [](auto& a, auto& b) { return at::bitwise_and(a, b); }, Numbers::Both},
      {Family::bitwise_or, [](auto& a, auto& b) { return at::bitwise_or(a, b); }, Numbers::Both},
      {Family::bitwise_xor, [](auto& a, auto& b) { return at::bitwise_xor(a, b); }, Numbers::Both},
      {Family::bitwise_left_shift, [](auto& a, auto& b) { return at::bitwise_left_shift(a, b); }, Numbers::Both},
      {Family::bitwise_right_shift, [](auto& a, auto& b) { return at::bitwise_right_shift(a, b); }, Numbers::Both},
  };
  return v;
}

struct OperandPair {
  const char* name;
  std::vector<TSpec> inputs;
  A a, b;
  bool numbers;  // involves a Python number
};

const std::vector<OperandPair>& operand_pairs() {
  static const std::vector<OperandPair> v = {
      {"f32_same", {F({3, 4}), F({3, 4})}, T(0), T(1), false},
      {"f32_bcast_row", {F({3, 4}), F({4})}, T(0), T(1), false},
      {"transposed_vs_contig", {F({3, 4}, Layout::T), F({3, 4})}, T(0), T(1), false},
      {"both_transposed", {F({3, 4}, Layout::T), D({3, 4}, Layout::T)}, T(0), T(1), false},
      {"outer_bcast", {F({3, 1}), F({1, 4})}, T(0), T(1), false},
      {"sliced_vs_transposed", {F({2, 3, 4}, Layout::Sliced), F({3, 4}, Layout::T)}, T(0), T(1), false},
      {"expanded_vs_transposed", {F({3, 4}, Layout::Expanded), F({3, 4}, Layout::T)}, T(0), T(1), false},
      {"int_float", {L({3, 4}), F({3, 4})}, T(0), T(1), false},
      {"bf16_zero_dim_f64", {BF({3, 4}), D({})}, T(0), T(1), false},
      {"zero_dim_int_vs_int", {L({}), L({2, 3}, Layout::T)}, T(0), T(1), false},
      {"int_int", {L({3, 4}), L({4})}, T(0), T(1), false},
      {"bool_bool", {Bo({3, 4}), Bo({3, 4}, Layout::T)}, T(0), T(1), false},
      {"bool_long", {Bo({3, 4}), L({3, 4})}, T(0), T(1), false},
      {"empty_bcast", {F({0, 4}), F({4})}, T(0), T(1), false},
      {"channels_last", {F({2, 3, 4, 5}, Layout::CL), F({2, 3, 4, 5}, Layout::CL)}, T(0), T(1), false},
      {"channels_last_bcast", {F({2, 3, 4, 5}, Layout::CL), F({5})}, T(0), T(1), false},
      {"channels_last_vs_contig", {F({2, 3, 4, 5}, Layout::CL), F({2, 3, 4, 5})}, T(0), T(1), false},
      {"requires_grad", {RG(F({3, 4})), F({4})}, T(0), T(1), false},
      {"f32_int_scalar", {F({3, 4}, Layout::T)}, T(0), I(3), true},
      {"long_float_scalar", {L({3, 4})}, T(0), Dbl(2.5), true},
      {"bf16_float_scalar", {BF({3, 4})}, T(0), Dbl(2.0), true},
      {"bool_int_scalar", {Bo({3, 4})}, T(0), I(3), true},
      {"bool_bool_scalar", {Bo({3, 4})}, T(0), B(true), true},
      {"long_int_scalar", {L({3, 4}, Layout::Sliced)}, T(0), I(2), true},
      {"scalar_first_int", {F({3, 4}, Layout::T)}, I(2), T(0), true},
      {"scalar_first_float_on_long", {L({3, 4})}, Dbl(1.5), T(0), true},
      {"scalar_first_on_zero_dim", {L({})}, Dbl(0.5), T(0), true},
      {"scalar_on_shape_1", {F({3, 1})}, T(0), I(2), true},
  };
  return v;
}

TEST(CapturePointwise, BinaryFamiliesMatchEager) {
  for (const auto& fam : binary_families()) {
    for (const auto& pair : operand_pairs()) {
      if (pair.numbers && fam.numbers == Numbers::None) continue;
      // torch.eq(2, x) is a TypeError in eager (only operator.eq reflects); expect a failure.
      if (pair.a.tensor < 0 && fam.numbers == Numbers::Second) {
        Graph g;
        at::Tensor t = make(pair.inputs[0]);
        ValueId x = g.add_input(meta_of(t));
        CaptureResult r = record_call(g, CaptureContext{}, fam.family, {pair.a.c, CallArg::tensor(x)}, {});
        EXPECT_FALSE(r.ok) << family_name(fam.family) << "/" << pair.name;
        EXPECT_NE(r.reason.find("argument 'input' must be Tensor"), std::string::npos) << r.reason;
        continue;
      }
      Case k{std::string(family_name(fam.family)) + "/" + pair.name, fam.family, pair.inputs, {pair.a, pair.b}, {},
             [&](const Tensors& t) { return Tensors{fam.eager(t[0], t[1])}; }};
      run_case(k);
    }
  }
}

// Binary families with extra arguments, in-place forms and their errors.
TEST(CapturePointwise, BinaryExtrasAndInplace) {
  const std::vector<Case> cases = {
      {"add_alpha", Family::add, {F({3, 4}), F({4})}, {T(0), T(1)}, {{"alpha", I(2)}},
       [](const Tensors& t) { return Tensors{at::add(t[0], t[1], 2)}; }},
      {"add_scalar_first_alpha", Family::add, {F({3, 4})}, {Dbl(2.0), T(0)}, {{"alpha", Dbl(3.0)}},
       [](const Tensors& t) { return Tensors{at::add(t[0], t[1], 3.0)}; }},
      {"add_int_float_alpha_fails", Family::add, {L({3}), L({3})}, {T(0), T(1)}, {{"alpha", Dbl(0.5)}},
       [](const Tensors& t) { return Tensors{at::add(t[0], t[1], 0.5)}; }},
      {"sub_alpha_scalar_first", Family::sub, {F({3, 4}, Layout::T)}, {I(2), T(0)}, {{"alpha", I(3)}},
       [](const Tensors& t) { return Tensors{at::sub(t[0], t[1], 3)}; }},
      {"div_floor", Family::div, {L({3, 4}), L({4})}, {T(0), T(1)}, {{"rounding_mode", Str("floor")}},
       [](const Tensors& t) { return Tensors{at::div(t[0], t[1], "floor")}; }},
      {"div_trunc_scalar", Family::div, {F({3, 4}, Layout::T)}, {T(0), Dbl(0.7)}, {{"rounding_mode", Str("trunc")}},
       [](const Tensors& t) { return Tensors{at::div(t[0], t[1], "trunc")}; }},
      {"div_bad_mode", Family::div, {F({3})}, {T(0), T(0)}, {{"rounding_mode", Str("round")}},
       [](const Tensors& t) { return Tensors{at::div(t[0], t[1], "round")}; }},
      {"pow_int_negative_fails", Family::pow, {L({3})}, {T(0), I(-1)}, {},
       [](const Tensors& t) { return Tensors{at::pow(t[0], t[1].item())}; }},
      {"add_inplace", Family::add_, {F({3, 4}, Layout::T), F({4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].add_(t[1])}; }},
      {"add_inplace_scalar_alpha", Family::add_, {F({3, 4})}, {T(0), I(2)}, {{"alpha", I(2)}},
       [](const Tensors& t) { return Tensors{t[0].add_(t[1], 2)}; }},
      {"add_inplace_int_float_fails", Family::add_, {L({3})}, {T(0), Dbl(2.5)}, {},
       [](const Tensors& t) { return Tensors{t[0].add_(t[1])}; }},
      {"add_inplace_bcast_self_fails", Family::add_, {F({4}), F({3, 4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].add_(t[1])}; }},
      {"iadd_on_number_is_add", Family::add_, {F({3})}, {I(2), T(0)}, {},
       [](const Tensors& t) { return Tensors{at::add(t[0], t[1])}; }},
      {"sub_inplace_long_float_tensor_fails", Family::sub_, {L({3}), F({3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].sub_(t[1])}; }},
      {"mul_inplace_f64_by_f32", Family::mul_, {D({2, 3}, Layout::Sliced), F({3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].mul_(t[1])}; }},
      {"div_inplace_int_fails", Family::div_, {L({3})}, {T(0), I(2)}, {},
       [](const Tensors& t) { return Tensors{t[0].div_(t[1])}; }},
      {"div_inplace_floor_int", Family::div_, {L({3})}, {T(0), I(2)}, {{"rounding_mode", Str("floor")}},
       [](const Tensors& t) { return Tensors{t[0].div_(t[1], "floor")}; }},
      {"pow_inplace_scalar", Family::pow_, {F({2, 2})}, {T(0), I(2)}, {},
       [](const Tensors& t) { return Tensors{t[0].pow_(t[1])}; }},
      {"ior_bool", Family::bitwise_or_, {Bo({2, 3}), Bo({3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].bitwise_or_(t[1])}; }},
      {"floor_divide_inplace", Family::floor_divide_, {L({2, 3})}, {T(0), I(2)}, {},
       [](const Tensors& t) { return Tensors{t[0].floor_divide_(t[1])}; }},
      {"remainder_inplace", Family::remainder_, {F({2, 3})}, {T(0), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{t[0].remainder_(t[1])}; }},
  };
  for (const auto& k : cases) run_case(k);
}

// ---- unary families -----------------------------------------------------------------------------

struct UnaryFamily {
  Family family;
  std::function<at::Tensor(const at::Tensor&)> eager;
  bool inplace = false;
};

const std::vector<UnaryFamily>& unary_families() {
#define U(f) {Family::f, [](const at::Tensor& x) { return at::f(x); }}
#define UI(f) {Family::f##_, [](const at::Tensor& x) { return at::Tensor(x).f##_(); }, true}
  static const std::vector<UnaryFamily> v = {
      U(abs), U(neg), U(exp), U(exp2), U(log), U(log2), U(log10), U(log1p), U(expm1), U(sqrt), U(rsqrt), U(sin),
      U(cos), U(tan), U(asin), U(acos), U(atan), U(sinh), U(cosh), U(tanh), U(sigmoid), U(erf), U(erfc),
      U(reciprocal), U(sign), U(floor), U(ceil), U(round), U(trunc), U(frac), U(square), U(isnan), U(isinf),
      U(isfinite), U(signbit), U(logical_not), U(bitwise_not), U(nan_to_num), U(relu), U(relu6), U(gelu), U(silu),
      U(mish), U(elu), U(selu), U(celu), U(leaky_relu), U(hardtanh), U(hardsigmoid), U(hardswish), U(softplus),
      {Family::logsigmoid, [](const at::Tensor& x) { return at::log_sigmoid(x); }},
      {Family::softsign, [](const at::Tensor& x) { return at::div(x, at::add(at::abs(x), 1)); }},
      {Family::tanhshrink, [](const at::Tensor& x) { return at::sub(x, at::tanh(x)); }},
      {Family::positive, [](const at::Tensor& x) { return at::positive(x); }},
      UI(abs), UI(neg), UI(exp), UI(log), UI(sqrt), UI(sin), UI(cos), UI(tanh), UI(sigmoid), UI(reciprocal), UI(sign),
      UI(floor), UI(ceil), UI(round), UI(trunc), UI(frac), UI(square), UI(bitwise_not), UI(relu), UI(nan_to_num),
      UI(logical_not),
  };
#undef U
#undef UI
  return v;
}

const std::vector<std::pair<const char*, TSpec>>& unary_inputs() {
  static const std::vector<std::pair<const char*, TSpec>> v = {
      {"f32", F({3, 4})},
      {"f32_transposed", F({3, 4}, Layout::T)},
      {"f32_sliced", F({2, 3, 5}, Layout::Sliced)},
      {"f64_expanded", D({3, 4}, Layout::Expanded)},
      {"f32_channels_last", F({2, 3, 4, 5}, Layout::CL)},
      {"f32_empty", F({0, 3})},
      {"f32_zero_dim", F({})},
      {"bf16", BF({3, 4}, Layout::T)},
      {"i64", L({3, 4})},
      {"bool", Bo({3, 4})},
      {"requires_grad", RG(F({2, 3}))},
  };
  return v;
}

TEST(CapturePointwise, UnaryFamiliesMatchEager) {
  for (const auto& fam : unary_families()) {
    for (const auto& in : unary_inputs()) {
      // In-place on a leaf that requires grad is an autograd error we do not model.
      if (fam.inplace && in.second.requires_grad) continue;
      Case k{std::string(family_name(fam.family)) + "/" + in.first, fam.family, {in.second}, {T(0)}, {},
             [&](const Tensors& t) { return Tensors{fam.eager(t[0])}; }};
      run_case(k);
    }
  }
}

TEST(CapturePointwise, ActivationArgumentsMatchEager) {
  const std::vector<Case> cases = {
      {"gelu_tanh", Family::gelu, {F({3, 4}, Layout::T)}, {T(0)}, {{"approximate", Str("tanh")}},
       [](const Tensors& t) { return Tensors{at::gelu(t[0], "tanh")}; }},
      {"gelu_bad_approximate", Family::gelu, {F({3})}, {T(0)}, {{"approximate", Str("fast")}},
       [](const Tensors& t) { return Tensors{at::gelu(t[0], "fast")}; }},
      {"leaky_relu_slope", Family::leaky_relu, {F({3, 4})}, {T(0), Dbl(0.2)}, {},
       [](const Tensors& t) { return Tensors{at::leaky_relu(t[0], 0.2)}; }},
      {"leaky_relu_inplace", Family::leaky_relu, {F({3, 4}, Layout::T)}, {T(0)}, {{"inplace", B(true)}},
       [](const Tensors& t) { at::Tensor x = t[0]; return Tensors{at::leaky_relu_(x, 0.01)}; }},
      {"relu_inplace_kw", Family::relu, {F({3, 4})}, {T(0)}, {{"inplace", B(true)}},
       [](const Tensors& t) { at::Tensor x = t[0]; return Tensors{at::relu_(x)}; }},
      {"elu_alpha", Family::elu, {F({3, 4})}, {T(0), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{at::elu(t[0], 0.5)}; }},
      {"celu_alpha", Family::celu, {F({3, 4})}, {T(0)}, {{"alpha", Dbl(2.0)}},
       [](const Tensors& t) { return Tensors{at::celu(t[0], 2.0)}; }},
      {"hardtanh_bounds", Family::hardtanh, {L({3, 4})}, {T(0), I(-1), I(2)}, {},
       [](const Tensors& t) { return Tensors{at::hardtanh(t[0], -1, 2)}; }},
      {"softplus_beta", Family::softplus, {F({3, 4}, Layout::Sliced)}, {T(0), I(2), I(10)}, {},
       [](const Tensors& t) { return Tensors{at::softplus(t[0], 2, 10)}; }},
      {"threshold", Family::threshold, {F({3, 4})}, {T(0), Dbl(0.1), Dbl(20.0)}, {},
       [](const Tensors& t) { return Tensors{at::threshold(t[0], 0.1, 20.0)}; }},
      {"threshold_inplace_fn", Family::threshold_, {F({3, 4})}, {T(0), Dbl(0.1), Dbl(20.0)}, {},
       [](const Tensors& t) { at::Tensor x = t[0]; return Tensors{at::threshold_(x, 0.1, 20.0)}; }},
      {"nan_to_num_args", Family::nan_to_num, {F({3, 4})}, {T(0)}, {{"nan", Dbl(0.0)}, {"posinf", Dbl(1.0)}},
       [](const Tensors& t) { return Tensors{at::nan_to_num(t[0], 0.0, 1.0)}; }},
      {"glu_last", Family::glu, {F({3, 4})}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{at::glu(t[0], -1)}; }},
      {"glu_dim0_transposed", Family::glu, {F({4, 6}, Layout::T)}, {T(0), I(0)}, {},
       [](const Tensors& t) { return Tensors{at::glu(t[0], 0)}; }},
      {"glu_odd_fails", Family::glu, {F({3, 5})}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{at::glu(t[0], -1)}; }},
      {"exp_inplace_int_fails", Family::exp_, {L({3})}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{t[0].exp_()}; }},
  };
  for (const auto& k : cases) run_case(k);
}

// ---- where, masked_fill, clamp, lerp, addcmul, addcdiv ------------------------------------------

TEST(CapturePointwise, SelectionAndTernaryMatchEager) {
  const std::vector<Case> cases = {
      {"where_tensors", Family::where, {Bo({3, 4}), F({3, 4}, Layout::T), D({4})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::where(t[0], t[1], t[2])}; }},
      {"where_scalar_other", Family::where, {Bo({3, 1}), BF({3, 4})}, {T(0), T(1), Dbl(0.0)}, {},
       [](const Tensors& t) { return Tensors{at::where(t[0], t[1], t[2])}; }},
      {"where_scalar_self_int", Family::where, {Bo({3, 4}), L({3, 4})}, {T(0), Dbl(1.5), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::where(t[0], t[1], t[2])}; }},
      {"where_two_scalars", Family::where, {Bo({3, 4}, Layout::T)}, {T(0), Dbl(1.0), Dbl(0.0)}, {},
       [](const Tensors& t) { return Tensors{at::where(t[0], t[1], t[2])}; }},
      {"where_two_int_scalars", Family::where, {Bo({2, 3})}, {T(0), I(1), I(0)}, {},
       [](const Tensors& t) { return Tensors{at::where(t[0], t[1], t[2])}; }},
      {"where_float_condition_fails", Family::where, {F({3}), F({3})}, {T(0), T(1), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::where(t[0], t[1], t[2])}; }},
      {"where_method", Family::where_method, {F({3, 4}), Bo({4}), F({3, 4})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::where(t[1], t[0], t[2])}; }},
      {"masked_fill_scalar", Family::masked_fill, {F({3, 4}, Layout::T), Bo({4})}, {T(0), T(1), Dbl(-1.0)}, {},
       [](const Tensors& t) { return Tensors{at::masked_fill(t[0], t[1], -1.0)}; }},
      {"masked_fill_bcast_mask", Family::masked_fill, {F({3, 1}), Bo({3, 4}), F({})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::masked_fill(t[0], t[1], t[2])}; }},
      {"masked_fill_int_value_on_long", Family::masked_fill, {L({2, 3}), Bo({2, 3})}, {T(0), T(1), I(7)}, {},
       [](const Tensors& t) { return Tensors{at::masked_fill(t[0], t[1], 7)}; }},
      {"masked_fill_float_mask_fails", Family::masked_fill, {F({2, 3}), F({2, 3})}, {T(0), T(1), I(7)}, {},
       [](const Tensors& t) { return Tensors{at::masked_fill(t[0], t[1], 7)}; }},
      {"masked_fill_inplace", Family::masked_fill_, {F({2, 3}, Layout::T), Bo({3})}, {T(0), T(1), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{t[0].masked_fill_(t[1], 0.5)}; }},
      {"clamp_scalars", Family::clamp, {F({3, 4}, Layout::T)}, {T(0), Dbl(-0.5), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{at::clamp(t[0], -0.5, 0.5)}; }},
      {"clamp_min_only_long_float", Family::clamp, {L({3, 4})}, {T(0)}, {{"min", Dbl(2.5)}},
       [](const Tensors& t) { return Tensors{at::clamp(t[0], 2.5)}; }},
      {"clamp_max_only_expanded", Family::clamp, {F({3, 4}, Layout::Expanded)}, {T(0)}, {{"max", I(0)}},
       [](const Tensors& t) { return Tensors{at::clamp(t[0], c10::nullopt, 0)}; }},
      {"clamp_tensor_bounds", Family::clamp, {F({3, 4}), F({4}), D({3, 1})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::clamp(t[0], t[1], t[2])}; }},
      {"clamp_none_fails", Family::clamp, {F({3})}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{at::clamp(t[0], c10::optional<at::Scalar>(), c10::optional<at::Scalar>())}; }},
      {"clamp_inplace", Family::clamp_, {F({3, 4}, Layout::T)}, {T(0), Dbl(-0.5), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{t[0].clamp_(-0.5, 0.5)}; }},
      {"clamp_inplace_long_float_fails", Family::clamp_, {L({3})}, {T(0), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{t[0].clamp_(0.5)}; }},
      {"lerp_scalar", Family::lerp, {F({3, 4}, Layout::T), F({4})}, {T(0), T(1), Dbl(0.3)}, {},
       [](const Tensors& t) { return Tensors{at::lerp(t[0], t[1], 0.3)}; }},
      {"lerp_tensor", Family::lerp, {F({3, 4}), F({3, 4}, Layout::T), F({3, 1})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::lerp(t[0], t[1], t[2])}; }},
      {"lerp_dtype_mismatch_fails", Family::lerp, {F({3}), D({3})}, {T(0), T(1), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{at::lerp(t[0], t[1], 0.5)}; }},
      {"addcmul", Family::addcmul, {F({3, 4}), F({4}), D({3, 1})}, {T(0), T(1), T(2)}, {{"value", Dbl(0.5)}},
       [](const Tensors& t) { return Tensors{at::addcmul(t[0], t[1], t[2], 0.5)}; }},
      {"addcdiv", Family::addcdiv, {F({3, 4}, Layout::T), F({3, 4}), F({3, 4})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::addcdiv(t[0], t[1], t[2])}; }},
      {"addcdiv_int_fails", Family::addcdiv, {F({3}), L({3}), L({3})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::addcdiv(t[0], t[1], t[2])}; }},
  };
  for (const auto& k : cases) run_case(k);
}

// ---- binding errors -------------------------------------------------------------------------------

struct ErrorCase {
  Family family;
  std::vector<A> args;
  std::vector<std::pair<std::string, A>> kwargs;
  const char* must_contain;
};

TEST(CapturePointwise, BindingErrorsNameTheCulprit) {
  const std::vector<ErrorCase> cases = {
      {Family::add, {T(0), T(0)}, {{"alpah", I(2)}}, "unexpected keyword argument 'alpah'"},
      {Family::add, {T(0), Str("x")}, {}, "argument 'other'"},
      {Family::add, {T(0)}, {}, "missing required argument 'other'"},
      {Family::add, {T(0), T(0), T(0)}, {}, "positional argument"},
      {Family::add, {T(0), T(0)}, {{"other", T(0)}}, "multiple values for argument 'other'"},
      {Family::gelu, {T(0)}, {{"approximate", I(1)}}, "argument 'approximate' must be str"},
      {Family::clamp, {T(0)}, {}, "'min' or 'max'"},
      {Family::relu, {I(3)}, {}, "argument 'input' must be Tensor"},
      {Family::glu, {T(0)}, {{"dim", I(5)}}, "glu: dim 5 out of range"},
      // Three-operand einsum may return a permuted layout eager chooses by its contraction path.
      {Family::einsum, {Str("ab,bc,cd->da"), T(0), T(0), T(0)}, {}, "einsum: only two operands"},
      {Family::einsum, {Str("ii->i"), T(0)}, {}, "einsum: repeated subscript 'i' in one operand (a diagonal)"},
  };
  for (const auto& k : cases) {
    Graph g;
    ValueId x = g.add_input(meta_of(at::zeros({2, 4})));
    auto to_call = [&](const A& a) { return a.tensor >= 0 ? CallArg::tensor(x) : a.c; };
    std::vector<CallArg> args;
    for (const auto& a : k.args) args.push_back(to_call(a));
    std::vector<std::pair<std::string, CallArg>> kwargs;
    for (const auto& kw : k.kwargs) kwargs.emplace_back(kw.first, to_call(kw.second));
    CaptureResult r = record_call(g, CaptureContext{}, k.family, args, kwargs);
    EXPECT_FALSE(r.ok) << k.must_contain;
    EXPECT_NE(r.reason.find(k.must_contain), std::string::npos) << r.reason;
    EXPECT_TRUE(g.nodes.empty());
  }
}

TEST(CapturePointwise, GradModeOffClearsRequiresGrad) {
  Graph g;
  TensorMeta m = meta_of(at::zeros({2, 3}));
  m.requires_grad = true;
  ValueId x = g.add_input(m);
  CaptureContext ctx;
  ctx.grad_enabled = false;
  CaptureResult r = record_call(g, ctx, Family::exp, {CallArg::tensor(x)}, {});
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_FALSE(g.meta(r.values[0]).requires_grad);
}

TEST(CapturePointwise, DefaultDtypeDrivesIntToFloat) {
  Graph g;
  ValueId x = g.add_input(meta_of(at::zeros({2, 3}, at::kLong)));
  CaptureContext ctx;
  ctx.default_dtype = ST::Double;
  CaptureResult r = record_call(g, ctx, Family::add, {CallArg::tensor(x), CallArg::of_double(0.5)}, {});
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(g.meta(r.values[0]).dtype, ST::Double);
  r = record_call(g, ctx, Family::sqrt, {CallArg::tensor(x)}, {});
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(g.meta(r.values[0]).dtype, ST::Double);
}

TEST(CapturePointwise, EveryFamilyHasPythonNames) {
  for (size_t i = 0; i < static_cast<size_t>(Family::kCount); ++i) {
    auto f = static_cast<Family>(i);
    EXPECT_FALSE(family_python_names(f).empty()) << family_name(f);
  }
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// ---- reductions ---------------------------------------------------------------------------------

TEST(CaptureReductions, MatchEager) {
  const std::vector<Case> cases = {
      {"sum_all", Family::sum, {F({3, 4}, Layout::T)}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{t[0].sum()}; }},
      {"sum_dim", Family::sum, {F({2, 3, 4}, Layout::Sliced)}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].sum(1)}; }},
      {"sum_dims_keepdim", Family::sum, {F({2, 3, 4, 5}, Layout::CL)}, {T(0), Ints({1, -1})}, {{"keepdim", B(true)}},
       [](const Tensors& t) { return Tensors{t[0].sum(at::IntArrayRef{1, -1}, true)}; }},
      {"sum_int_to_long", Family::sum, {{ST::Int, {3, 4}}}, {T(0), I(0)}, {},
       [](const Tensors& t) { return Tensors{t[0].sum(0)}; }},
      {"sum_bool", Family::sum, {Bo({3, 4})}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].sum()}; }},
      {"sum_dtype", Family::sum, {BF({3, 4})}, {T(0), I(1)}, {{"dtype", DT(ST::Float)}},
       [](const Tensors& t) { return Tensors{t[0].sum(1, false, at::kFloat)}; }},
      {"sum_requires_grad", Family::sum, {RG(F({3, 4}))}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].sum(1)}; }},
      {"sum_zero_dim", Family::sum, {F({})}, {T(0), I(-1)}, {}, [](const Tensors& t) { return Tensors{t[0].sum(-1)}; }},
      {"sum_empty", Family::sum, {F({0, 4})}, {T(0), I(0)}, {}, [](const Tensors& t) { return Tensors{t[0].sum(0)}; }},
      {"sum_bad_dim", Family::sum, {F({3, 4})}, {T(0), I(2)}, {}, [](const Tensors& t) { return Tensors{t[0].sum(2)}; }},
      {"sum_repeated_dim", Family::sum, {F({3, 4})}, {T(0), Ints({0, -2})}, {},
       [](const Tensors& t) { return Tensors{t[0].sum(at::IntArrayRef{0, -2})}; }},
      {"mean_dim", Family::mean, {D({3, 4}, Layout::T)}, {T(0), I(0)}, {{"keepdim", B(true)}},
       [](const Tensors& t) { return Tensors{t[0].mean(0, true)}; }},
      {"mean_long_fails", Family::mean, {L({3})}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].mean()}; }},
      {"mean_long_dtype", Family::mean, {L({3, 2})}, {T(0), I(1)}, {{"dtype", DT(ST::Double)}},
       [](const Tensors& t) { return Tensors{t[0].mean(1, false, at::kDouble)}; }},
      {"prod_all_int", Family::prod, {L({3, 4})}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].prod()}; }},
      {"prod_dim", Family::prod, {F({3, 4}, Layout::T)}, {T(0), I(1), B(true)}, {},
       [](const Tensors& t) { return Tensors{t[0].prod(1, true)}; }},
      {"amax_dims", Family::amax, {F({2, 3, 4})}, {T(0), Ints({0, 2})}, {},
       [](const Tensors& t) { return Tensors{t[0].amax({0, 2})}; }},
      {"amin_all", Family::amin, {L({2, 3})}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].amin()}; }},
      {"max_full", Family::max, {F({3, 4}, Layout::T)}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].max()}; }},
      {"max_dim", Family::max, {F({3, 4}, Layout::T)}, {T(0), I(0)}, {},
       [](const Tensors& t) { auto r = t[0].max(0); return Tensors{std::get<0>(r), std::get<1>(r)}; }},
      {"min_dim_keepdim", Family::min, {L({3, 4})}, {T(0), I(-1), B(true)}, {},
       [](const Tensors& t) { auto r = t[0].min(-1, true); return Tensors{std::get<0>(r), std::get<1>(r)}; }},
      {"max_other_tensor", Family::max, {F({3, 4}), F({4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::maximum(t[0], t[1])}; }},
      {"max_requires_grad", Family::max, {RG(F({3, 4}))}, {T(0), I(1)}, {},
       [](const Tensors& t) { auto r = t[0].max(1); return Tensors{std::get<0>(r), std::get<1>(r)}; }},
      {"argmax_all_keepdim", Family::argmax, {F({3, 4}, Layout::T)}, {T(0)}, {{"keepdim", B(true)}},
       [](const Tensors& t) { return Tensors{t[0].argmax(c10::nullopt, true)}; }},
      {"argmin_dim", Family::argmin, {F({3, 4})}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].argmin(1)}; }},
      {"all_full_u8", Family::all, {{ST::Byte, {3}}}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].all()}; }},
      {"any_dim_float", Family::any, {F({3, 4})}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{t[0].any(1)}; }},
      {"var_default", Family::var, {F({3, 4}, Layout::T)}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].var()}; }},
      {"var_dim_unbiased_false", Family::var, {F({3, 4})}, {T(0), I(1), B(false)}, {},
       [](const Tensors& t) { return Tensors{t[0].var(1, false)}; }},
      {"var_legacy_unbiased", Family::var, {F({3, 4})}, {T(0), B(false)}, {},
       [](const Tensors& t) { return Tensors{t[0].var(false)}; }},
      {"std_correction_keepdim", Family::std, {D({3, 4})}, {T(0), I(0)}, {{"correction", I(0)}, {"keepdim", B(true)}},
       [](const Tensors& t) { return Tensors{at::std(t[0], at::IntArrayRef{0}, at::Scalar(0), true)}; }},
      {"var_long_fails", Family::var, {L({3})}, {T(0)}, {}, [](const Tensors& t) { return Tensors{t[0].var()}; }},
      {"var_mean", Family::var_mean, {F({3, 4})}, {T(0), I(1)}, {},
       [](const Tensors& t) { auto r = at::var_mean(t[0], at::IntArrayRef{1}); return Tensors{std::get<0>(r), std::get<1>(r)}; }},
      {"std_mean_all", Family::std_mean, {F({3, 4}, Layout::T)}, {T(0)}, {},
       [](const Tensors& t) { auto r = at::std_mean(t[0]); return Tensors{std::get<0>(r), std::get<1>(r)}; }},
      {"norm_default", Family::norm, {F({3, 4}, Layout::T)}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{at::linalg_vector_norm(t[0], 2)}; }},
      {"norm_p1_dim", Family::norm, {F({3, 4})}, {T(0), I(1), I(1), B(true)}, {},
       [](const Tensors& t) { return Tensors{at::linalg_vector_norm(t[0], 1, at::IntArrayRef{1}, true)}; }},
      {"norm_long_fails", Family::norm, {L({3})}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{at::linalg_vector_norm(t[0], 2)}; }},
      {"vector_norm_inf", Family::vector_norm, {F({3, 4})}, {T(0), Dbl(INFINITY), Ints({0})}, {},
       [](const Tensors& t) { return Tensors{at::linalg_vector_norm(t[0], INFINITY, at::IntArrayRef{0})}; }},
      {"logsumexp", Family::logsumexp, {F({3, 4}, Layout::T)}, {T(0), I(1)}, {{"keepdim", B(true)}},
       [](const Tensors& t) { return Tensors{at::logsumexp(t[0], {1}, true)}; }},
      {"logsumexp_long", Family::logsumexp, {L({3, 4})}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{at::logsumexp(t[0], {1})}; }},
      {"cumsum_transposed", Family::cumsum, {F({3, 4}, Layout::T)}, {T(0), I(0)}, {},
       [](const Tensors& t) { return Tensors{at::cumsum(t[0], 0)}; }},
      {"cumsum_bool", Family::cumsum, {Bo({3, 4})}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{at::cumsum(t[0], 1)}; }},
      {"cumprod_dtype", Family::cumprod, {L({3, 4})}, {T(0), I(1)}, {{"dtype", DT(ST::Double)}},
       [](const Tensors& t) { return Tensors{at::cumprod(t[0], 1, at::kDouble)}; }},
      {"count_nonzero_all", Family::count_nonzero, {F({3, 4}, Layout::T)}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{at::count_nonzero(t[0])}; }},
      {"count_nonzero_dim", Family::count_nonzero, {L({3, 4})}, {T(0), I(0)}, {},
       [](const Tensors& t) { return Tensors{at::count_nonzero(t[0], c10::optional<int64_t>(0))}; }},
      {"softmax_transposed", Family::softmax, {F({3, 4}, Layout::T)}, {T(0), I(0)}, {},
       [](const Tensors& t) { return Tensors{at::softmax(t[0], 0)}; }},
      {"softmax_channels_last", Family::softmax, {F({2, 3, 4, 5}, Layout::CL)}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{at::softmax(t[0], 1)}; }},
      {"softmax_long_fails", Family::softmax, {L({3})}, {T(0), I(0)}, {},
       [](const Tensors& t) { return Tensors{at::softmax(t[0], 0)}; }},
      {"softmax_long_dtype", Family::softmax, {L({3})}, {T(0), I(0), DT(ST::Double)}, {},
       [](const Tensors& t) { return Tensors{at::softmax(t[0], 0, at::kDouble)}; }},
      {"softmax_fn_stacklevel", Family::softmax_fn, {F({2, 3})}, {T(0), I(-1), I(5)}, {{"dtype", DT(ST::Double)}},
       [](const Tensors& t) { return Tensors{at::softmax(t[0], -1, at::kDouble)}; }},
      {"softmax_fn_implicit_dim", Family::softmax_fn, {F({2, 3, 4})}, {T(0)}, {},
       [](const Tensors& t) { return Tensors{at::softmax(t[0], 0)}; }},
      {"softmax_bad_dim", Family::softmax, {F({2, 3})}, {T(0), I(3)}, {},
       [](const Tensors& t) { return Tensors{at::softmax(t[0], 3)}; }},
      {"log_softmax", Family::log_softmax, {BF({3, 4}, Layout::Sliced)}, {T(0), I(1)}, {},
       [](const Tensors& t) { return Tensors{at::log_softmax(t[0], 1)}; }},
      {"log_softmax_fn", Family::log_softmax_fn, {RG(F({3, 4}))}, {T(0)}, {{"dim", I(1)}},
       [](const Tensors& t) { return Tensors{at::log_softmax(t[0], 1)}; }},
  };
  for (const auto& k : cases) run_case(k);
}

// ---- nn and linear algebra ----------------------------------------------------------------------

TEST(CaptureNN, MatchEager) {
  const std::vector<Case> cases = {
      {"matmul_2d_transposed", Family::matmul, {F({3, 4}, Layout::T), F({4, 2})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_1d_1d", Family::matmul, {F({4}), F({4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_2d_1d", Family::matmul, {F({3, 4}), F({4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_1d_3d", Family::matmul, {F({4}), F({2, 4, 5})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_3d_2d_transposed", Family::matmul, {F({2, 4, 5}, Layout::T), F({2, 3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_heads_transposed", Family::matmul, {F({2, 3, 4, 5}, Layout::Swap12), F({2, 3, 5, 4}, Layout::Swap12)},
       {T(0), T(1)}, {}, [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_3d_2d_heads_transposed", Family::matmul, {F({2, 4, 5}, Layout::Swap12), F({5, 3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_2d_3d", Family::matmul, {F({3, 4}), F({2, 4, 5})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_broadcast_batch", Family::matmul, {F({2, 1, 3, 4}), F({5, 4, 2})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_requires_grad", Family::matmul, {RG(F({3, 4})), F({4, 2})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_long", Family::matmul, {L({3, 4}), L({4, 2})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_mismatch_fails", Family::matmul, {F({3, 4}), F({5, 2})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul_dtype_mismatch_fails", Family::matmul, {F({3, 4}), D({4, 2})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"mm", Family::mm, {F({3, 4}), F({4, 2}, Layout::T)}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::mm(t[0], t[1])}; }},
      {"bmm", Family::bmm, {F({2, 3, 4}), F({2, 4, 5})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::bmm(t[0], t[1])}; }},
      {"addmm", Family::addmm, {F({5}), F({3, 4}, Layout::T), F({4, 5})}, {T(0), T(1), T(2)},
       {{"beta", Dbl(0.5)}, {"alpha", I(2)}},
       [](const Tensors& t) { return Tensors{at::addmm(t[0], t[1], t[2], 0.5, 2)}; }},
      {"baddbmm", Family::baddbmm, {F({2, 3, 5}), F({2, 3, 4}), F({2, 4, 5})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::baddbmm(t[0], t[1], t[2])}; }},
      {"outer", Family::outer, {F({3}), F({4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::outer(t[0], t[1])}; }},
      {"dot", Family::dot, {D({4}), D({4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::dot(t[0], t[1])}; }},
      {"linear_transposed_input", Family::linear, {F({3, 4}, Layout::T), F({5, 4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::linear(t[0], t[1])}; }},
      {"linear_3d_bias", Family::linear, {F({2, 4, 5}, Layout::T), F({6, 2}), F({6})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::linear(t[0], t[1], t[2])}; }},
      {"linear_weight_transposed", Family::linear, {RG(F({3, 4})), F({5, 4}, Layout::T), F({5})}, {T(0), T(1), T(2)},
       {}, [](const Tensors& t) { return Tensors{at::linear(t[0], t[1], t[2])}; }},
      {"linear_bad_features", Family::linear, {F({3, 4}), F({5, 3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::linear(t[0], t[1])}; }},
      {"layer_norm", Family::layer_norm, {F({3, 4}, Layout::T), F({4}), F({4})}, {T(0), Ints({4}), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::layer_norm(t[0], {4}, t[2], t[3])}; }},
      {"layer_norm_channels_last", Family::layer_norm, {F({2, 3, 4, 5}, Layout::CL)}, {T(0), Ints({4, 5})},
       {{"eps", Dbl(1e-3)}}, [](const Tensors& t) { return Tensors{at::layer_norm(t[0], {4, 5}, {}, {}, 1e-3)}; }},
      {"layer_norm_bad_shape", Family::layer_norm, {F({3, 4})}, {T(0), Ints({3})}, {},
       [](const Tensors& t) { return Tensors{at::layer_norm(t[0], {3})}; }},
      {"rms_norm", Family::rms_norm, {F({3, 4}, Layout::T), F({4})}, {T(0), Ints({4}), T(1)}, {{"eps", Dbl(1e-6)}},
       [](const Tensors& t) { return Tensors{at::rms_norm(t[0], {4}, t[2], 1e-6)}; }},
      {"group_norm_channels_last", Family::group_norm, {F({2, 4, 3, 3}, Layout::CL), F({4}), F({4})},
       {T(0), I(2), T(1), T(2)}, {}, [](const Tensors& t) { return Tensors{at::group_norm(t[0], 2, t[2], t[3])}; }},
      {"group_norm_transposed", Family::group_norm, {F({2, 4, 3, 3}, Layout::T)}, {T(0), I(2)}, {},
       [](const Tensors& t) { return Tensors{at::group_norm(t[0], 2)}; }},
      {"group_norm_3d", Family::group_norm, {F({2, 4, 5})}, {T(0), I(4)}, {},
       [](const Tensors& t) { return Tensors{at::group_norm(t[0], 4)}; }},
      {"group_norm_bad_groups", Family::group_norm, {F({2, 4, 5})}, {T(0), I(3)}, {},
       [](const Tensors& t) { return Tensors{at::group_norm(t[0], 3)}; }},
      {"batch_norm_eval_cl", Family::batch_norm, {F({2, 3, 4, 5}, Layout::CL), F({3}), F({3}, Layout::Expanded)},
       {T(0), T(1), T(2)}, {},
       [](const Tensors& t) {
         return Tensors{at::batch_norm(t[0], {}, {}, t[1], t[2].abs(), false, 0.1, 1e-5, true)};
       }},
      {"batch_norm_eval_2d_transposed", Family::batch_norm, {F({3, 4}, Layout::T), F({4}), F({4}), F({4}), F({4})},
       {T(0), T(1), T(2), T(3), T(4)}, {},
       [](const Tensors& t) { return Tensors{at::batch_norm(t[0], t[3], t[4], t[1], t[2], false, 0.1, 1e-5, true)}; }},
      {"dropout_training", Family::dropout, {F({3, 4}, Layout::T)}, {T(0), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{at::dropout(t[0], 0.5, true)}; }, true},
      {"dropout_training_sliced", Family::dropout, {F({3, 4}, Layout::Sliced)}, {T(0), Dbl(0.2)}, {},
       [](const Tensors& t) { return Tensors{at::dropout(t[0], 0.2, true)}; }, true},
      {"dropout_training_expanded", Family::dropout, {F({3, 4}, Layout::Expanded)}, {T(0), Dbl(0.2)}, {},
       [](const Tensors& t) { return Tensors{at::dropout(t[0], 0.2, true)}; }, true},
      {"dropout_eval_is_identity", Family::dropout, {F({3, 4}, Layout::T)}, {T(0)}, {{"training", B(false)}},
       [](const Tensors& t) { return Tensors{t[0]}; }},
      {"dropout_bad_p", Family::dropout, {F({3})}, {T(0), Dbl(1.5)}, {},
       [](const Tensors& t) { return Tensors{at::dropout(t[0], 1.5, true)}; }},
      {"embedding", Family::embedding, {L({2, 3}), F({6, 4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::embedding(t[1], t[0])}; }},
      {"embedding_padding_idx", Family::embedding, {L({5}), RG(F({6, 4}))}, {T(0), T(1), I(-1)}, {},
       [](const Tensors& t) { return Tensors{at::embedding(t[1], t[0], 5)}; }},
      {"embedding_float_index_fails", Family::embedding, {F({5}), F({6, 4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::embedding(t[1], t[0])}; }},
      {"conv2d_padding", Family::conv2d, {F({2, 3, 8, 8}), F({4, 3, 3, 3}), F({4})}, {T(0), T(1), T(2)},
       {{"padding", I(1)}}, [](const Tensors& t) { return Tensors{at::conv2d(t[0], t[1], t[2], at::IntArrayRef{1}, at::IntArrayRef{1})}; }},
      {"conv2d_channels_last_stride", Family::conv2d, {F({2, 3, 9, 8}, Layout::CL), F({6, 3, 3, 3})}, {T(0), T(1)},
       {{"stride", Ints({2, 1})}, {"dilation", I(2)}},
       [](const Tensors& t) { return Tensors{at::conv2d(t[0], t[1], at::Tensor(), at::IntArrayRef{2, 1}, at::IntArrayRef{0}, at::IntArrayRef{2})}; }},
      {"conv2d_groups_same", Family::conv2d, {F({1, 4, 5, 5}), F({4, 2, 3, 3})}, {T(0), T(1)},
       {{"padding", Str("same")}, {"groups", I(2)}},
       [](const Tensors& t) { return Tensors{at::conv2d(t[0], t[1], at::Tensor(), at::IntArrayRef{1}, c10::string_view("same"), at::IntArrayRef{1}, 2)}; }},
      {"conv2d_unbatched", Family::conv2d, {F({3, 6, 6}), F({2, 3, 3, 3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::conv2d(t[0], t[1])}; }},
      {"conv2d_channel_mismatch", Family::conv2d, {F({1, 3, 5, 5}), F({2, 4, 3, 3})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::conv2d(t[0], t[1])}; }},
      {"conv1d", Family::conv1d, {F({2, 3, 8}), F({4, 3, 3})}, {T(0), T(1)}, {{"stride", I(2)}, {"padding", I(1)}},
       [](const Tensors& t) { return Tensors{at::conv1d(t[0], t[1], at::Tensor(), at::IntArrayRef{2}, at::IntArrayRef{1})}; }},
      {"conv1d_valid", Family::conv1d, {F({2, 3, 8}), F({4, 3, 3})}, {T(0), T(1)}, {{"padding", Str("valid")}},
       [](const Tensors& t) { return Tensors{at::conv1d(t[0], t[1], at::Tensor(), at::IntArrayRef{1}, c10::string_view("valid"))}; }},
      {"sdpa", Family::scaled_dot_product_attention, {F({2, 4, 6, 8}), F({2, 4, 6, 8}), F({2, 4, 6, 8})},
       {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      {"sdpa_causal_heads_transposed", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Swap12), F({2, 4, 6, 8}, Layout::Swap12), F({2, 4, 6, 8}, Layout::Swap12)}, {T(0), T(1), T(2)}, {{"is_causal", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, true)}; }},
      {"sdpa_bool_mask_v_dim", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}), F({2, 4, 5, 8}), F({2, 4, 5, 3}), Bo({6, 5})}, {T(0), T(1), T(2), T(3)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], t[3])}; }},
      {"sdpa_query_heads_transposed_only", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Swap12), F({2, 4, 6, 8}), F({2, 4, 6, 8})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      {"sdpa_fully_permuted_math_path", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::T), F({2, 4, 6, 8}), F({2, 4, 6, 8})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      {"sdpa_3d_scale", Family::scaled_dot_product_attention, {F({4, 6, 8}), F({4, 6, 8}), F({4, 6, 8})},
       {T(0), T(1), T(2)}, {{"scale", Dbl(0.5)}},
       [](const Tensors& t) {
         return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, false, 0.5)};
       }},
      {"sdpa_dropout", Family::scaled_dot_product_attention, {F({2, 4, 6, 8}), F({2, 4, 6, 8}), F({2, 4, 6, 8})},
       {T(0), T(1), T(2), None(), Dbl(0.5)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.5)}; }, true},
      {"sdpa_requires_grad", Family::scaled_dot_product_attention,
       {RG(F({2, 4, 6, 8})), F({2, 4, 6, 8}), F({2, 4, 6, 8})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      // GPT-2: q, k, v split from one projection, then heads transposed (not dense).
      {"sdpa_split_qkv_causal", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Split12), F({2, 4, 6, 8}, Layout::Split12), F({2, 4, 6, 8}, Layout::Split12)},
       {T(0), T(1), T(2)}, {{"is_causal", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, true)}; }},
      {"sdpa_split_q_one_batch_one_head", Family::scaled_dot_product_attention,
       {F({1, 1, 6, 8}, Layout::Split12), F({1, 1, 6, 8}), F({1, 1, 6, 8})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      {"sdpa_split_q_one_head", Family::scaled_dot_product_attention,
       {F({2, 1, 6, 8}, Layout::Split12), F({2, 1, 6, 8}), F({2, 1, 6, 8})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      {"sdpa_split_q_value_head_size_differs", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Split12), F({2, 4, 5, 8}), F({2, 4, 5, 3})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      {"sdpa_gqa_split_q_bool_mask", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Split12), F({2, 2, 6, 8}, Layout::Split12), F({2, 2, 6, 8}, Layout::Split12),
        Bo({2, 1, 6, 6})},
       {T(0), T(1), T(2), T(3)}, {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], t[3], 0.0, false, {}, true)}; }},
      // Grouped-query attention (LLaMA with fewer key/value heads, transformers' sdpa path).
      {"sdpa_gqa", Family::scaled_dot_product_attention, {F({2, 4, 6, 8}), F({2, 2, 5, 8}), F({2, 2, 5, 8})},
       {T(0), T(1), T(2)}, {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, false, {}, true)}; }},
      {"sdpa_gqa_heads_transposed_causal", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Swap12), F({2, 2, 6, 8}, Layout::Swap12), F({2, 2, 6, 8}, Layout::Swap12)},
       {T(0), T(1), T(2)}, {{"is_causal", B(true)}, {"scale", Dbl(0.25)}, {"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, true, 0.25, true)}; }},
      {"sdpa_gqa_kv_permuted_math_path", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Swap12), F({2, 2, 5, 8}, Layout::T), F({2, 2, 5, 8}, Layout::T)},
       {T(0), T(1), T(2)}, {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, false, {}, true)}; }},
      {"sdpa_gqa_bool_mask_v_dim", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}), F({2, 1, 5, 8}), F({2, 1, 5, 3}), Bo({2, 1, 6, 5})}, {T(0), T(1), T(2), T(3)},
       {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], t[3], 0.0, false, {}, true)}; }},
      {"sdpa_gqa_3d", Family::scaled_dot_product_attention, {F({4, 6, 8}), F({2, 5, 8}), F({2, 5, 8})},
       {T(0), T(1), T(2)}, {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, false, {}, true)}; }},
      {"sdpa_gqa_heads_do_not_divide", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}), F({2, 3, 5, 8}), F({2, 3, 5, 8})}, {T(0), T(1), T(2)}, {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, false, {}, true)}; }},
      {"sdpa_gqa_key_value_heads_differ_math_path", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}, Layout::Swap12), F({2, 2, 5, 8}), F({2, 1, 5, 8})}, {T(0), T(1), T(2)}, {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, false, {}, true)}; }},
      {"sdpa_gqa_more_kv_than_query_heads", Family::scaled_dot_product_attention,
       {F({2, 2, 6, 8}), F({2, 4, 5, 8}), F({2, 4, 5, 8})}, {T(0), T(1), T(2)}, {{"enable_gqa", B(true)}},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2], {}, 0.0, false, {}, true)}; }},
      {"sdpa_fewer_kv_heads_without_gqa_fails", Family::scaled_dot_product_attention,
       {F({2, 4, 6, 8}), F({2, 2, 5, 8}), F({2, 2, 5, 8})}, {T(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::scaled_dot_product_attention(t[0], t[1], t[2])}; }},
      {"pad_transposed", Family::pad, {F({3, 4}, Layout::T)}, {T(0), Ints({1, 2})}, {},
       [](const Tensors& t) { return Tensors{at::pad(t[0], {1, 2})}; }},
      {"pad_channels_last_value", Family::pad, {F({2, 3, 4, 5}, Layout::CL)}, {T(0), Ints({1, 1, 0, -1})},
       {{"value", Dbl(2.0)}}, [](const Tensors& t) { return Tensors{at::pad(t[0], {1, 1, 0, -1}, "constant", 2.0)}; }},
      {"pad_sliced", Family::pad, {F({2, 3, 4}, Layout::Sliced)}, {T(0), Ints({2, 0, 1, 1})}, {},
       [](const Tensors& t) { return Tensors{at::pad(t[0], {2, 0, 1, 1})}; }},
      {"pad_reflect_unsupported", Family::pad, {F({1, 3, 4})}, {T(0), Ints({1, 1})}, {{"mode", Str("reflect")}},
       [](const Tensors& t) -> Tensors { throw std::runtime_error("unsupported here"); }},
      {"normalize_transposed", Family::normalize, {F({3, 4}, Layout::T)}, {T(0)}, {},
       [](const Tensors& t) {
         return Tensors{at::div(t[0], at::linalg_vector_norm(t[0], 2, at::IntArrayRef{1}, true).clamp_min(1e-12).expand_as(t[0]))};
       }},
      {"einsum_matmul", Family::einsum, {F({3, 4}, Layout::T), F({4, 5})}, {Str("ij,jk->ik"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("ij,jk->ik", {t[1], t[2]})}; }},
      {"einsum_output_transposed", Family::einsum, {F({3, 4}), F({4, 5})}, {Str("ij,jk->ki"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("ij,jk->ki", {t[1], t[2]})}; }},
      {"einsum_attention_scores", Family::einsum, {F({2, 3, 4, 5}, Layout::Swap12), F({2, 3, 6, 5})},
       {Str("bhld,bhmd->bhlm"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("bhld,bhmd->bhlm", {t[1], t[2]})}; }},
      {"einsum_ellipsis", Family::einsum, {F({2, 3, 4}), F({4, 5})}, {Str("...ij,jk->...ik"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("...ij,jk->...ik", {t[1], t[2]})}; }},
      {"einsum_outer_product", Family::einsum, {F({3}), F({4})}, {Str("i,j"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("i,j", {t[1], t[2]})}; }},
      {"einsum_scaled_rows_transposed", Family::einsum, {F({3, 4}, Layout::T), F({3})}, {Str("ij,i->ji"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("ij,i->ji", {t[1], t[2]})}; }},
      {"einsum_rowwise_dot", Family::einsum, {F({3, 4}), F({3, 4})}, {Str("ij,ij->i"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("ij,ij->i", {t[1], t[2]})}; }},
      {"einsum_size_mismatch", Family::einsum, {F({3, 4}), F({5, 5})}, {Str("ij,jk->ik"), T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::einsum("ij,jk->ik", {t[1], t[2]})}; }},
      {"mse_loss", Family::mse_loss, {F({3, 4}), F({3, 4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::mse_loss(t[0], t[1])}; }},
      {"mse_loss_none_transposed", Family::mse_loss, {F({3, 4}, Layout::T), F({3, 4}, Layout::T)}, {T(0), T(1)},
       {{"reduction", Str("none")}}, [](const Tensors& t) { return Tensors{at::mse_loss(t[0], t[1], 0)}; }},
      {"cross_entropy", Family::cross_entropy, {RG(F({4, 6})), L({4})}, {T(0), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::cross_entropy_loss(t[0], t[1])}; }},
      {"cross_entropy_none_3d", Family::cross_entropy, {F({2, 6, 3}), L({2, 3})}, {T(0), T(1)},
       {{"reduction", Str("none")}, {"label_smoothing", Dbl(0.1)}},
       [](const Tensors& t) { return Tensors{at::cross_entropy_loss(t[0], t[1], {}, 0, -100, 0.1)}; }},
  };
  for (const auto& k : cases) run_case(k);
}

// ---- composites recorded as eager's decomposition (capture_composites.cpp) ----------------------

TEST(CaptureComposites, DiffMatchesEager) {
  // Eager lambdas see the positional arguments only: tensors passed as prepend/append are
  // positional here (input, n, dim, prepend, append); keyword binding is the Signature's job.
  auto diff = [](int64_t n, int64_t dim) {
    return [=](const Tensors& t) { return Tensors{at::diff(t[0], n, dim)}; };
  };
  const std::vector<Case> cases = {
      {"diff_last_dim", Family::diff, {F({3, 5})}, {T(0)}, {}, diff(1, -1)},
      {"diff_dim0_transposed", Family::diff, {F({3, 5}, Layout::T)}, {T(0)}, {{"dim", I(0)}}, diff(1, 0)},
      {"diff_twice_sliced", Family::diff, {F({2, 3, 4}, Layout::Sliced)}, {T(0), I(2)}, {}, diff(2, -1)},
      {"diff_expanded_dim0", Family::diff, {F({3, 4}, Layout::Expanded)}, {T(0)}, {{"dim", I(0)}}, diff(1, 0)},
      // What transformers' find_packed_sequence_indices runs on position ids.
      {"diff_long_prepend", Family::diff, {L({2, 8}), L({2, 1})}, {T(0), I(1), I(-1), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::diff(t[0], 1, -1, t[3])}; }},
      {"diff_prepend_append_transposed", Family::diff, {F({3, 4}, Layout::T), F({1, 4}), F({2, 4}, Layout::T)},
       {T(0), I(1), I(0), T(1), T(2)}, {},
       [](const Tensors& t) { return Tensors{at::diff(t[0], 1, 0, t[3], t[4])}; }},
      {"diff_append_only_twice", Family::diff, {F({3, 4}), F({3, 2})}, {T(0), I(2), I(1), None(), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::diff(t[0], 2, 1, {}, t[4])}; }},
      {"diff_bool_is_xor", Family::diff, {Bo({3, 6})}, {T(0)}, {}, diff(1, -1)},
      {"diff_order_beyond_length", Family::diff, {F({3, 2})}, {T(0), I(5)}, {}, diff(5, -1)},
      {"diff_order_zero_is_a_copy", Family::diff, {F({3, 4}, Layout::T), F({3, 1})}, {T(0), I(0), I(-1), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::diff(t[0], 0, -1, t[3])}; }},
      {"diff_0d_fails", Family::diff, {F({})}, {T(0)}, {}, diff(1, -1)},
      {"diff_negative_order_fails", Family::diff, {F({3})}, {T(0), I(-1)}, {}, diff(-1, -1)},
      {"diff_dim_out_of_range_fails", Family::diff, {F({3})}, {T(0)}, {{"dim", I(1)}}, diff(1, 1)},
      {"diff_prepend_rank_fails", Family::diff, {F({3, 4}), F({4})}, {T(0), I(1), I(-1), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::diff(t[0], 1, -1, t[3])}; }},
      {"diff_prepend_shape_fails", Family::diff, {F({3, 4}), F({2, 1})}, {T(0), I(1), I(-1), T(1)}, {},
       [](const Tensors& t) { return Tensors{at::diff(t[0], 1, -1, t[3])}; }},
  };
  for (const auto& k : cases) run_case(k);
}

// ---- the binder machinery ---------------------------------------------------------------------------

TEST(Binder, VarargsGatherIntsAndTuples) {
  Signature sig("view(Tensor self, int[] *size)");
  Graph g;
  ValueId x = g.add_input(meta_of(at::zeros({6})));
  BoundArgs a;
  ASSERT_FALSE(sig.bind({CallArg::tensor(x), CallArg::of_int(2), CallArg::of_int(3)}, {}, a));
  EXPECT_EQ(a.ints("size"), (std::vector<int64_t>{2, 3}));
  ASSERT_FALSE(sig.bind({CallArg::tensor(x), CallArg::of_ints({3, 2})}, {}, a));
  EXPECT_EQ(a.ints("size"), (std::vector<int64_t>{3, 2}));
  ASSERT_FALSE(sig.bind({CallArg::tensor(x)}, {{"size", CallArg::of_ints({6})}}, a));
  EXPECT_EQ(a.ints("size"), (std::vector<int64_t>{6}));
  auto err = sig.bind({CallArg::tensor(x), CallArg::of_int(2), CallArg::of_double(1.5)}, {}, a);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("'size'"), std::string::npos) << *err;
}

TEST(Binder, DefaultsAndKeywordOnly) {
  Signature sig("f(Tensor input, int dim=-1, *, float eps=1e-05, str mode='a', int[] pad=[1, 2], bool flag=True)");
  Graph g;
  ValueId x = g.add_input(meta_of(at::zeros({2})));
  BoundArgs a;
  ASSERT_FALSE(sig.bind({CallArg::tensor(x)}, {{"eps", CallArg::of_int(1)}}, a));
  EXPECT_EQ(a.integer("dim"), -1);
  EXPECT_EQ(a.get("eps").kind, CallArg::Kind::Double);  // float parameters normalise ints
  EXPECT_DOUBLE_EQ(a.number("eps"), 1.0);
  EXPECT_EQ(a.str("mode"), "a");
  EXPECT_EQ(a.ints("pad"), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(a.boolean("flag"));
  auto err = sig.bind({CallArg::tensor(x), CallArg::of_int(0), CallArg::of_double(1.0)}, {}, a);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("positional"), std::string::npos) << *err;
  EXPECT_THROW(a.tensor("nope"), fastdyn::InternalError);
  EXPECT_THROW(Signature("broken(Tensor"), fastdyn::InternalError);
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// Random two-operand contractions: whatever einsum captures must match eager's layout exactly.
TEST(CaptureNN, RandomEinsumContractionsMatchEager) {
  std::mt19937 rng(7);
  const std::string letters = "abcde";
  int captured = 0, total = 0;
  const int iterations = std::getenv("FD_EINSUM_ITERS") ? std::atoi(std::getenv("FD_EINSUM_ITERS")) : 80;
  for (int iter = 0; iter < iterations; ++iter) {
    std::map<char, int64_t> sizes;
    // Mostly sizes 2..4; size-1 subscripts now and then (they change eager's bmm arrangement).
    for (char ch : letters) sizes[ch] = rng() % 8 == 0 ? 1 : 2 + static_cast<int64_t>(rng() % 3);
    auto pick = [&](size_t n) {
      std::string s = letters;
      std::shuffle(s.begin(), s.end(), rng);
      return s.substr(0, n);
    };
    std::string a = pick(1 + rng() % 3), b = pick(1 + rng() % 3);
    std::set<char> all(a.begin(), a.end());
    all.insert(b.begin(), b.end());
    std::string out;
    for (char ch : all)
      if (rng() % 10 < 6) out += ch;
    std::shuffle(out.begin(), out.end(), rng);
    std::string eq = a + "," + b + "->" + out;
    auto spec = [&](const std::string& t) {
      std::vector<int64_t> s;
      for (char ch : t) s.push_back(sizes[ch]);
      return F(s, rng() % 3 == 0 ? Layout::T : Layout::C);
    };
    Case k{"einsum " + eq, Family::einsum, {spec(a), spec(b)}, {Str(""), T(0), T(1)}, {},
           [eq](const Tensors& t) { return Tensors{at::einsum(eq, {t[1], t[2]})}; }};
    k.args[0] = {-1, CallArg::of_string(eq)};
    ++total;
    if (run_case(k, /*allow_unsupported=*/true)) ++captured;
  }
  std::printf("einsum: captured %d of %d random equations\n", captured, total);
  EXPECT_GE(captured * 10, total * 6) << "only " << captured << " of " << total << " random equations captured";
}

}  // namespace
}  // namespace fastdyn::codegen
