// codegen/capture/capture_pointwise.cpp — binders of the elementwise families: binary arithmetic,
// comparisons and bitwise ops (torch.X, Tensor.X and the operator module forms, in-place ones
// too), unary math, activations, where / masked_fill / clamp / lerp / addcmul / addcdiv.
//
// Every family is a row of a table (BinaryOp / UnaryOp) run by one generic recorder:
// plan_elementwise computes the result dtype (PyTorch's result_type over tensors and wrapped
// Python numbers, then the op's dtype rule), the broadcast shape and TensorIterator's output
// strides; the recorder then picks the ATen overload by operand kinds:
//   tensor ∘ tensor -> the Tensor overload; tensor ∘ number -> the Scalar overload;
//   number ∘ tensor -> the op's reversed form (rsub, a flipped comparison, pow.Scalar...) or, for
//   ops without one, a 0-dim scalar_tensor of the common dtype fed to the Tensor overload (which
//   promotes exactly as eager's wrapped number does, because the common dtype already dominates).
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"

#include "runtime/errors.h"

namespace fastdyn::codegen {

namespace {

using ST = c10::ScalarType;
using K = CallArg::Kind;
constexpr OpId kNoOp = OpId::kCount;

bool is_tensor(const CallArg& a) { return a.kind == K::Tensor; }

struct Plan {
  ST common = ST::Undefined;
  ST out = ST::Undefined;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  bool requires_grad = false;
  TensorMeta meta() const { return make_meta(out, device, shape, strides, requires_grad); }
};

// Dtype (by the ops.def Dtype rule of `recorded`, the op the binder records), shape and layout of
// an elementwise op over `operands` (tensors or Python numbers; the order is the ATen operand
// order, which breaks layout ties).
std::optional<std::string> plan_elementwise(const BindCall& c, const std::string& op, OpId recorded,
                                            const std::vector<const CallArg*>& operands, Plan& p) {
  std::vector<DtypeOperand> dts;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<ValueId> tensors;
  static const TensorMeta kScalarMeta;  // a wrapped number: 0-dim, no strides
  std::vector<const TensorMeta*> metas;
  for (const CallArg* a : operands) {
    if (is_tensor(*a)) {
      const TensorMeta& m = c.graph.meta(a->value);
      dts.push_back({m.dtype, m.sizes.empty(), false});
      shapes.push_back(m.sizes);
      // A zero-dim tensor may live on the CPU beside device tensors; the others decide.
      if (tensors.empty() || !m.sizes.empty()) p.device = m.device;
      tensors.push_back(a->value);
      metas.push_back(&m);
    } else {
      dts.push_back({scalar_dtype(*a), true, true});
      metas.push_back(&kScalarMeta);
    }
  }
  FD_CHECK(!tensors.empty(), op + " planned without a tensor operand");
  p.common = result_type(dts, c.ctx.default_dtype);
  if (auto err = result_dtype(recorded, op, p.common, std::nullopt, c.ctx.default_dtype, p.out)) return err;
  auto shape = broadcast_shapes(shapes);
  if (!shape) {
    std::string s;
    for (size_t i = 0; i < shapes.size(); ++i) s += (i ? " and " : "") + shape_str(shapes[i]);
    return op + ": shapes " + s + " cannot be broadcast together";
  }
  p.shape = *shape;
  p.strides = tensor_iterator_strides(p.shape, metas);
  p.requires_grad = any_requires_grad(c.graph, c.ctx, tensors);
  return std::nullopt;
}

// In-place ops write into `self`: the result must cast to its dtype and fit its shape.
std::optional<std::string> check_inplace(const BindCall& c, const std::string& op, ValueId self, const Plan& p) {
  const TensorMeta& m = c.graph.meta(self);
  for (size_t i = 0; i < m.sizes.size(); ++i)
    if (m.strides[i] == 0 && m.sizes[i] > 1)
      return op + ": more than one element of the written-to tensor refers to a single memory location";
  if (!can_cast(p.out, m.dtype))
    return op + ": result type " + dtype_name(p.out) + " can't be cast to the desired output type " +
           dtype_name(m.dtype);
  if (p.shape != m.sizes)
    return op + ": output with shape " + shape_str(m.sizes) + " doesn't match the broadcast shape " +
           shape_str(p.shape);
  return std::nullopt;
}

TensorMeta inplace_meta(const BindCall& c, ValueId self, const Plan& p) {
  TensorMeta m = c.graph.meta(self);
  m.requires_grad = m.requires_grad || p.requires_grad;
  return m;
}

// A Python number as a 0-dim tensor of dtype `dtype` (see the file comment).
ValueId scalar_tensor(BindCall& c, const CallArg& number, ST dtype, c10::Device device) {
  return emit1(c.graph, OpId::scalar_tensor,
               {scalar_arg(number), Arg::of_dtype(dtype), Arg::none(), Arg::of_device(device), Arg::none()},
               make_meta(dtype, device, {}, {}, false));
}

// ---- binary ops -------------------------------------------------------------------------------

enum class Extra : uint8_t { None, Alpha, RoundingMode };

struct BinaryOp {
  const char* name;
  OpId tt;          // Tensor, Tensor
  OpId ts;          // Tensor, Scalar
  OpId rs;          // number ∘ tensor as rs(tensor, number) (commutative ops: ts; sub: rsub; lt: gt)
  OpId st;          // Scalar, Tensor (pow.Scalar)
  Extra extra;
  OpId inplace_t;   // self ∘= tensor
  OpId inplace_s;   // self ∘= number
  bool no_bool;     // sub: rejects bool operands outright
};

#define FD_BIN(name, tt, ts, rs, st, extra, it, is) \
  BinaryOp { name, OpId::tt, OpId::ts, OpId::rs, OpId::st, Extra::extra, OpId::it, OpId::is, false }

const BinaryOp kAdd = FD_BIN("add", add_Tensor, add_Scalar, add_Scalar, kCount, Alpha, add__Tensor, add__Scalar);
const BinaryOp kSub = [] {
  BinaryOp b = FD_BIN("sub", sub_Tensor, sub_Scalar, rsub_Scalar, kCount, Alpha, sub__Tensor, sub__Scalar);
  b.no_bool = true;
  return b;
}();
const BinaryOp kMul = FD_BIN("mul", mul_Tensor, mul_Scalar, mul_Scalar, kCount, None, mul__Tensor, mul__Scalar);
const BinaryOp kDiv = FD_BIN("div", div_Tensor, div_Scalar, kCount, kCount, None, div__Tensor, div__Scalar);
const BinaryOp kDivMode = FD_BIN("div", div_Tensor_mode, div_Scalar_mode, kCount, kCount, RoundingMode,
                                 div__Tensor_mode, div__Scalar_mode);
const BinaryOp kFloorDiv = FD_BIN("floor_divide", floor_divide, floor_divide_Scalar, kCount, kCount, None,
                                  floor_divide__Tensor, floor_divide__Scalar);
const BinaryOp kRemainder = FD_BIN("remainder", remainder_Tensor, remainder_Scalar, kCount, kCount, None,
                                   remainder__Tensor, remainder__Scalar);
const BinaryOp kFmod = FD_BIN("fmod", fmod_Tensor, fmod_Scalar, kCount, kCount, None, kCount, kCount);
const BinaryOp kPow = FD_BIN("pow", pow_Tensor_Tensor, pow_Tensor_Scalar, kCount, pow_Scalar, None,
                             pow__Tensor, pow__Scalar);
const BinaryOp kMaximum = FD_BIN("maximum", maximum, kCount, kCount, kCount, None, kCount, kCount);
const BinaryOp kMinimum = FD_BIN("minimum", minimum, kCount, kCount, kCount, None, kCount, kCount);
const BinaryOp kAtan2 = FD_BIN("atan2", atan2, kCount, kCount, kCount, None, kCount, kCount);
const BinaryOp kLogicalAnd = FD_BIN("logical_and", logical_and, kCount, kCount, kCount, None, kCount, kCount);
const BinaryOp kLogicalOr = FD_BIN("logical_or", logical_or, kCount, kCount, kCount, None, kCount, kCount);
const BinaryOp kLogicalXor = FD_BIN("logical_xor", logical_xor, kCount, kCount, kCount, None, kCount, kCount);
const BinaryOp kEq = FD_BIN("eq", eq_Tensor, eq_Scalar, eq_Scalar, kCount, None, kCount, kCount);
const BinaryOp kNe = FD_BIN("ne", ne_Tensor, ne_Scalar, ne_Scalar, kCount, None, kCount, kCount);
const BinaryOp kLt = FD_BIN("lt", lt_Tensor, lt_Scalar, gt_Scalar, kCount, None, kCount, kCount);
const BinaryOp kLe = FD_BIN("le", le_Tensor, le_Scalar, ge_Scalar, kCount, None, kCount, kCount);
const BinaryOp kGt = FD_BIN("gt", gt_Tensor, gt_Scalar, lt_Scalar, kCount, None, kCount, kCount);
const BinaryOp kGe = FD_BIN("ge", ge_Tensor, ge_Scalar, le_Scalar, kCount, None, kCount, kCount);
const BinaryOp kAnd = FD_BIN("bitwise_and", bitwise_and_Tensor, bitwise_and_Scalar, bitwise_and_Scalar, kCount, None, bitwise_and__Tensor, bitwise_and__Scalar);
const BinaryOp kOr = FD_BIN("bitwise_or", bitwise_or_Tensor, bitwise_or_Scalar, bitwise_or_Scalar, kCount,
                            None, bitwise_or__Tensor, bitwise_or__Scalar);
const BinaryOp kXor = FD_BIN("bitwise_xor", bitwise_xor_Tensor, bitwise_xor_Scalar, bitwise_xor_Scalar, kCount, None, bitwise_xor__Tensor, bitwise_xor__Scalar);
const BinaryOp kLshift = FD_BIN("bitwise_left_shift", bitwise_left_shift_Tensor, bitwise_left_shift_Tensor_Scalar,
                                kCount, kCount, None, kCount, kCount);
const BinaryOp kRshift = FD_BIN("bitwise_right_shift", bitwise_right_shift_Tensor, bitwise_right_shift_Tensor_Scalar,
                                kCount, kCount, None, kCount, kCount);
#undef FD_BIN

bool is_one(const CallArg& a) {
  return (a.kind == K::Int && a.i == 1) || (a.kind == K::Bool && a.b) || (a.kind == K::Double && a.d == 1.0);
}

// Validates op-specific constraints that depend on the operands' dtypes.
std::optional<std::string> check_binary(const BinaryOp& op, const Plan& p, const CallArg& a, const CallArg& b,
                                        const Graph& g, const std::vector<Arg>& extras) {
  auto dt = [&](const CallArg& x) { return is_tensor(x) ? g.meta(x.value).dtype : scalar_dtype(x); };
  if (op.no_bool && (dt(a) == ST::Bool || dt(b) == ST::Bool))
    return std::string(op.name) + ": subtraction with a bool tensor is not supported; use ~ or logical_not()";
  if (op.extra == Extra::Alpha && !extras.empty()) {
    const Arg& alpha = extras.front();
    if (is_integral(p.common, true) && alpha.kind == Arg::Kind::Double)
      return std::string(op.name) + ": for integral input tensors, argument 'alpha' must not be a floating point number";
    if (p.common != ST::Bool && alpha.kind == Arg::Kind::Bool)
      return std::string(op.name) + ": boolean 'alpha' only supported for bool results";
  }
  if (op.extra == Extra::RoundingMode && !extras.empty() && extras.front().kind == Arg::Kind::String) {
    const std::string& m = extras.front().str;
    if (m != "trunc" && m != "floor")
      return std::string(op.name) + ": 'rounding_mode' must be None, 'trunc' or 'floor', not '" + m + "'";
  }
  if (op.tt == OpId::pow_Tensor_Tensor && is_integral(p.common, false) && !is_tensor(b) && b.kind == K::Int && b.i < 0)
    return "pow: integers to negative integer powers are not allowed";
  return std::nullopt;
}

CaptureResult record_binary(BindCall& c, const BinaryOp& op, const CallArg& a, const CallArg& b,
                            std::vector<Arg> extras) {
  if (!is_tensor(a) && !is_tensor(b)) return CaptureResult::fail(std::string(op.name) + ": no tensor operand");
  Plan p;
  // The dtype rule of the overload recorded below (a reversed form `rs` has its forward op's rule;
  // pow's differ: pow(bool tensor, number) runs, pow of bool tensors does not).
  OpId recorded = is_tensor(a) ? (is_tensor(b) || op.ts == kNoOp ? op.tt : op.ts) : (op.st != kNoOp ? op.st : op.tt);
  if (auto err = plan_elementwise(c, op.name, recorded, {&a, &b}, p)) return CaptureResult::fail(*err);
  if (auto err = check_binary(op, p, a, b, c.graph, extras)) return CaptureResult::fail(*err);
  auto args = [&](Arg x, Arg y) {
    std::vector<Arg> v{std::move(x), std::move(y)};
    v.insert(v.end(), extras.begin(), extras.end());
    return v;
  };
  if (is_tensor(a) && is_tensor(b))
    return tensor_result(emit1(c.graph, op.tt, args(Arg::of_value(a.value), Arg::of_value(b.value)), p.meta()));
  if (is_tensor(a)) {
    if (op.ts != kNoOp)
      return tensor_result(emit1(c.graph, op.ts, args(Arg::of_value(a.value), scalar_arg(b)), p.meta()));
    ValueId s = scalar_tensor(c, b, p.common, p.device);
    return tensor_result(emit1(c.graph, op.tt, args(Arg::of_value(a.value), Arg::of_value(s)), p.meta()));
  }
  if (op.st != kNoOp) {  // NB: pow(number, tensor) allocates a contiguous output
    p.strides = contiguous_strides(p.shape);
    return tensor_result(emit1(c.graph, op.st, args(scalar_arg(a), Arg::of_value(b.value)), p.meta()));
  }
  // add's alpha scales the second operand, so swapping is only exact for alpha == 1.
  bool swappable = op.rs != kNoOp && (op.rs == OpId::rsub_Scalar || extras.empty() ||
                                      op.extra != Extra::Alpha || (extras[0].kind == Arg::Kind::Int && extras[0].i == 1));
  if (swappable)
    return tensor_result(emit1(c.graph, op.rs, args(Arg::of_value(b.value), scalar_arg(a)), p.meta()));
  ValueId s = scalar_tensor(c, a, p.common, p.device);
  return tensor_result(emit1(c.graph, op.tt, args(Arg::of_value(s), Arg::of_value(b.value)), p.meta()));
}

// self ∘= other. A non-tensor `self` (`n = 0; n += x`) is Python's fallback to the out-of-place
// operator, so it records that instead.
CaptureResult record_binary_inplace(BindCall& c, const BinaryOp& op, Family out_of_place, const CallArg& a,
                                    const CallArg& b, std::vector<Arg> extras) {
  if (!is_tensor(a)) return record_call(c.graph, c.ctx, out_of_place, c.args, c.kwargs);
  std::string name = std::string(op.name) + "_";
  OpId id = is_tensor(b) ? op.inplace_t : op.inplace_s;
  FD_CHECK(id != kNoOp, name + " has no in-place overload");
  Plan p;
  if (auto err = plan_elementwise(c, name, id, {&a, &b}, p)) return CaptureResult::fail(*err);
  if (auto err = check_binary(op, p, a, b, c.graph, extras)) return CaptureResult::fail(*err);
  if (auto err = check_inplace(c, name, a.value, p)) return CaptureResult::fail(*err);
  std::vector<Arg> args{Arg::of_value(a.value), is_tensor(b) ? Arg::of_value(b.value) : scalar_arg(b)};
  args.insert(args.end(), extras.begin(), extras.end());
  return tensor_result(emit1(c.graph, id, std::move(args), inplace_meta(c, a.value, p)));
}

std::vector<Arg> alpha_extra(const BoundArgs& a) { return {scalar_arg(a.get("alpha"))}; }

const BinaryOp& div_op(const BoundArgs& a) { return a.is_none("rounding_mode") ? kDiv : kDivMode; }
std::vector<Arg> div_extra(const BoundArgs& a) {
  if (a.is_none("rounding_mode")) return {};
  return {Arg::of_string(a.str("rounding_mode"))};
}

// Families whose Python signature is (input, other) with nothing else; `SIG` spells the types.
#define FD_SIMPLE_BINARY(fam, op, types)                                                        \
  CaptureResult bind_##fam(BindCall& c) {                                                       \
    static const Signature sig(#fam "(" types " input, " types " other)");                     \
    BoundArgs a;                                                                                \
    if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);                            \
    return record_binary(c, op, a.get("input"), a.get("other"), {});                           \
  }
// torch.X forms that take a Python number only as the second operand.
#define FD_TENSOR_FIRST_BINARY(fam, op)                                                         \
  CaptureResult bind_##fam(BindCall& c) {                                                       \
    static const Signature sig(#fam "(Tensor input, Tensor|Number other)");                    \
    BoundArgs a;                                                                                \
    if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);                            \
    return record_binary(c, op, a.get("input"), a.get("other"), {});                           \
  }
#define FD_SIMPLE_BINARY_INPLACE(fam, op, out_family)                                           \
  CaptureResult bind_##fam(BindCall& c) {                                                       \
    static const Signature sig(#fam "(Tensor|Number self, Tensor|Number other)");              \
    BoundArgs a;                                                                                \
    if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);                            \
    return record_binary_inplace(c, op, Family::out_family, a.get("self"), a.get("other"), {}); \
  }

}  // namespace

// A 0-d floating tensor passed where ATen takes a Number (`alpha`, `value`): eager's argument
// parser reads its value; torch.optim does so with a tensor learning rate (the way torch.compile's
// docs keep a scheduler from recompiling), and passes Adam's step size as one on a compiler's
// path. The graph computes with the tensor instead of reading it.
static const CallArg* tensor_as_number(const BindCall& c, const char* name) {
  for (const auto& [k, v] : c.kwargs)
    if (k == name && v.kind == CallArg::Kind::Tensor && c.graph.meta(v.value).dim() == 0 &&
        c10::isFloatingType(c.graph.meta(v.value).dtype))
      return &v;
  return nullptr;
}

// add/sub(x, y, alpha=t) with a 0-d tensor t: x +- y * t (in place into x for add_/sub_).
static std::optional<CaptureResult> tensor_alpha(BindCall& c, Family op) {
  const CallArg* alpha = tensor_as_number(c, "alpha");
  if (!alpha || c.args.size() != 2 || !is_tensor(c.args[1]) || !c10::isFloatingType(c.graph.meta(c.args[1].value).dtype))
    return std::nullopt;
  CaptureResult scaled = record_call(c.graph, c.ctx, Family::mul, {c.args[1], *alpha}, {});
  if (!scaled.ok) return CaptureResult::fail("alpha: " + scaled.reason);
  return record_call(c.graph, c.ctx, op, {c.args[0], CallArg::tensor(scaled.values.at(0))}, {});
}

CaptureResult bind_add(BindCall& c) {
  if (auto r = tensor_alpha(c, Family::add)) return *r;
  FD_BIND_OR_RETURN(c, a, "add(Tensor|Number input, Tensor|Number other, *, Number alpha=1)");
  return record_binary(c, kAdd, a.get("input"), a.get("other"), alpha_extra(a));
}

CaptureResult bind_sub(BindCall& c) {
  if (auto r = tensor_alpha(c, Family::sub)) return *r;
  FD_BIND_OR_RETURN(c, a, "sub(Tensor|Number input, Tensor|Number other, *, Number alpha=1)");
  return record_binary(c, kSub, a.get("input"), a.get("other"), alpha_extra(a));
}

// torch.rsub(input, other, alpha) is other - alpha * input; eager computes sub(other, input).
CaptureResult bind_rsub(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "rsub(Tensor input, Tensor|Number other, *, Number alpha=1)");
  static const BinaryOp rsub = [] {
    BinaryOp b = kSub;
    b.name = "rsub";
    return b;
  }();
  return record_binary(c, rsub, a.get("other"), a.get("input"), alpha_extra(a));
}

CaptureResult bind_div(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "div(Tensor|Number input, Tensor|Number other, *, str? rounding_mode=None)");
  return record_binary(c, div_op(a), a.get("input"), a.get("other"), div_extra(a));
}

FD_SIMPLE_BINARY(mul, kMul, "Tensor|Number")
FD_SIMPLE_BINARY(true_divide, kDiv, "Tensor|Number")
FD_SIMPLE_BINARY(floor_divide, kFloorDiv, "Tensor|Number")
FD_SIMPLE_BINARY(remainder, kRemainder, "Tensor|Number")
FD_TENSOR_FIRST_BINARY(fmod, kFmod)
FD_SIMPLE_BINARY(pow, kPow, "Tensor|Number")
FD_SIMPLE_BINARY(maximum, kMaximum, "Tensor")
FD_SIMPLE_BINARY(minimum, kMinimum, "Tensor")
FD_SIMPLE_BINARY(atan2, kAtan2, "Tensor")
FD_SIMPLE_BINARY(logical_and, kLogicalAnd, "Tensor")
FD_SIMPLE_BINARY(logical_or, kLogicalOr, "Tensor")
FD_SIMPLE_BINARY(logical_xor, kLogicalXor, "Tensor")
FD_TENSOR_FIRST_BINARY(eq, kEq)
FD_TENSOR_FIRST_BINARY(ne, kNe)
FD_TENSOR_FIRST_BINARY(lt, kLt)
FD_TENSOR_FIRST_BINARY(le, kLe)
FD_TENSOR_FIRST_BINARY(gt, kGt)
FD_TENSOR_FIRST_BINARY(ge, kGe)
FD_SIMPLE_BINARY(op_eq, kEq, "Tensor|Number")
FD_SIMPLE_BINARY(op_ne, kNe, "Tensor|Number")
FD_SIMPLE_BINARY(op_lt, kLt, "Tensor|Number")
FD_SIMPLE_BINARY(op_le, kLe, "Tensor|Number")
FD_SIMPLE_BINARY(op_gt, kGt, "Tensor|Number")
FD_SIMPLE_BINARY(op_ge, kGe, "Tensor|Number")
FD_SIMPLE_BINARY(bitwise_and, kAnd, "Tensor|Number")
FD_SIMPLE_BINARY(bitwise_or, kOr, "Tensor|Number")
FD_SIMPLE_BINARY(bitwise_xor, kXor, "Tensor|Number")
FD_SIMPLE_BINARY(bitwise_left_shift, kLshift, "Tensor|Number")
FD_SIMPLE_BINARY(bitwise_right_shift, kRshift, "Tensor|Number")

// `number / x` runs Tensor.__rtruediv__, which eager computes as reciprocal(x) * number.
CaptureResult bind_truediv(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "truediv(Tensor|Number input, Tensor|Number other)");
  const CallArg& x = a.get("input");
  const CallArg& y = a.get("other");
  if (is_tensor(x) || !is_tensor(y)) return record_binary(c, kDiv, x, y, {});
  CaptureResult r = record_call(c.graph, c.ctx, Family::reciprocal, {y}, {});
  if (!r.ok) return CaptureResult::fail("truediv: " + r.reason);
  return record_binary(c, kMul, CallArg::tensor(r.values[0]), x, {});
}

CaptureResult bind_add_(BindCall& c) {
  if (auto r = tensor_alpha(c, Family::add_)) return *r;
  FD_BIND_OR_RETURN(c, a, "add_(Tensor|Number self, Tensor|Number other, *, Number alpha=1)");
  return record_binary_inplace(c, kAdd, Family::add, a.get("self"), a.get("other"), alpha_extra(a));
}

CaptureResult bind_sub_(BindCall& c) {
  if (auto r = tensor_alpha(c, Family::sub_)) return *r;
  FD_BIND_OR_RETURN(c, a, "sub_(Tensor|Number self, Tensor|Number other, *, Number alpha=1)");
  return record_binary_inplace(c, kSub, Family::sub, a.get("self"), a.get("other"), alpha_extra(a));
}

CaptureResult bind_div_(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "div_(Tensor|Number self, Tensor|Number other, *, str? rounding_mode=None)");
  return record_binary_inplace(c, div_op(a), Family::truediv, a.get("self"), a.get("other"), div_extra(a));
}

FD_SIMPLE_BINARY_INPLACE(mul_, kMul, mul)
FD_SIMPLE_BINARY_INPLACE(floor_divide_, kFloorDiv, floor_divide)
FD_SIMPLE_BINARY_INPLACE(remainder_, kRemainder, remainder)
FD_SIMPLE_BINARY_INPLACE(pow_, kPow, pow)
FD_SIMPLE_BINARY_INPLACE(bitwise_and_, kAnd, bitwise_and)
FD_SIMPLE_BINARY_INPLACE(bitwise_or_, kOr, bitwise_or)
FD_SIMPLE_BINARY_INPLACE(bitwise_xor_, kXor, bitwise_xor)
#undef FD_SIMPLE_BINARY
#undef FD_TENSOR_FIRST_BINARY
#undef FD_SIMPLE_BINARY_INPLACE

// ---- unary ops and activations --------------------------------------------------------------

namespace {

struct UnaryOp {
  Signature sig;          // Python signature; its first parameter is the tensor
  OpId op;
  OpId inplace_op;        // kNoOp when none
  // ATen arguments after self, in schema order: a bound parameter name, or "=<literal>" for a
  // constant the Python API does not expose (elu's scale).
  std::vector<const char*> forward;
  bool inplace = false;   // the family itself is the in-place form (Tensor.exp_)
  bool contiguous = false;  // the kernel allocates a contiguous output, not TensorIterator's
};

Arg literal_arg(const std::string& text) {
  if (text == "None") return Arg::none();
  if (text.find('.') != std::string::npos) return Arg::of_double(std::stod(text));
  return Arg::of_int(std::stoll(text));
}

CaptureResult record_unary(BindCall& c, const UnaryOp& u) {
  BoundArgs a;
  if (auto err = u.sig.bind(c, a)) return CaptureResult::fail(*err);
  const std::string& pname = u.sig.name();
  // The tensor is the first parameter: "input" for functions, "self" for in-place methods.
  const CallArg& x = a.values.count("input") ? a.get("input") : a.get("self");
  bool inplace = u.inplace || (a.values.count("inplace") && a.boolean("inplace"));
  Plan p;
  if (auto err = plan_elementwise(c, pname, inplace && u.inplace_op != kNoOp ? u.inplace_op : u.op, {&x}, p))
    return CaptureResult::fail(*err);
  if (u.contiguous) p.strides = contiguous_strides(p.shape);
  std::vector<Arg> args{Arg::of_value(x.value)};
  for (const char* f : u.forward) {
    if (f[0] == '=') args.push_back(literal_arg(f + 1));
    else args.push_back(const_arg(a.get(f)));
  }
  if (a.values.count("approximate")) {
    const std::string& m = a.str("approximate");
    if (m != "none" && m != "tanh")
      return CaptureResult::fail(pname + ": 'approximate' must be 'none' or 'tanh', not '" + m + "'");
  }
  if (!inplace) return tensor_result(emit1(c.graph, u.op, std::move(args), p.meta()));
  if (u.inplace_op == kNoOp) return CaptureResult::fail(pname + ": inplace=True is not supported");
  if (auto err = check_inplace(c, u.inplace ? pname : pname + "_", x.value, p)) return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, u.inplace_op, std::move(args), inplace_meta(c, x.value, p)));
}

}  // namespace

// FD_UNARY(family, aten op, in-place aten op): torch.X(input) / Tensor.X().
// FD_UNARY_INPLACE(family, in-place aten op): Tensor.X_(). Dtype rules: ops.def's Dtype column.
#define FD_UNARY(fam, op, iop)                                                                   \
  CaptureResult bind_##fam(BindCall& c) {                                                        \
    static const UnaryOp u{Signature(#fam "(Tensor input)"), OpId::op, OpId::iop, {}};           \
    return record_unary(c, u);                                                                   \
  }
#define FD_UNARY_INPLACE(fam, iop)                                                               \
  CaptureResult bind_##fam(BindCall& c) {                                                        \
    static const UnaryOp u{Signature(#fam "(Tensor self)"), OpId::iop, OpId::iop, {}, true};     \
    return record_unary(c, u);                                                                   \
  }

FD_UNARY(abs, abs, abs_)
FD_UNARY(neg, neg, neg_)
FD_UNARY(exp, exp, exp_)
FD_UNARY(exp2, exp2, kCount)
FD_UNARY(log, log, log_)
FD_UNARY(log2, log2, kCount)
FD_UNARY(log10, log10, kCount)
FD_UNARY(log1p, log1p, kCount)
FD_UNARY(expm1, expm1, kCount)
FD_UNARY(sqrt, sqrt, sqrt_)
FD_UNARY(rsqrt, rsqrt, kCount)
FD_UNARY(sin, sin, sin_)
FD_UNARY(cos, cos, cos_)
FD_UNARY(tan, tan, kCount)
FD_UNARY(asin, asin, kCount)
FD_UNARY(acos, acos, kCount)
FD_UNARY(atan, atan, kCount)
FD_UNARY(sinh, sinh, kCount)
FD_UNARY(cosh, cosh, kCount)
FD_UNARY(tanh, tanh, tanh_)
FD_UNARY(sigmoid, sigmoid, sigmoid_)
FD_UNARY(erf, erf, kCount)
FD_UNARY(erfc, erfc, kCount)
FD_UNARY(reciprocal, reciprocal, reciprocal_)
FD_UNARY(sign, sign, sign_)
FD_UNARY(floor, floor, floor_)
FD_UNARY(ceil, ceil, ceil_)
FD_UNARY(round, round, round_)
FD_UNARY(trunc, trunc, trunc_)
FD_UNARY(frac, frac, frac_)
FD_UNARY(square, square, square_)
FD_UNARY(isnan, isnan, kCount)
FD_UNARY(isinf, isinf, kCount)
FD_UNARY(isfinite, isfinite, kCount)
FD_UNARY(signbit, signbit, kCount)
FD_UNARY(logical_not, logical_not, logical_not_)
FD_UNARY(bitwise_not, bitwise_not, bitwise_not_)
CaptureResult bind_logsigmoid(BindCall& c) {
  static const UnaryOp u{Signature("logsigmoid(Tensor input)"), OpId::log_sigmoid, kNoOp, {}, false,
                         /*contiguous=*/true};
  return record_unary(c, u);
}

FD_UNARY_INPLACE(abs_, abs_)
FD_UNARY_INPLACE(neg_, neg_)
FD_UNARY_INPLACE(exp_, exp_)
FD_UNARY_INPLACE(log_, log_)
FD_UNARY_INPLACE(sqrt_, sqrt_)
FD_UNARY_INPLACE(sin_, sin_)
FD_UNARY_INPLACE(cos_, cos_)
FD_UNARY_INPLACE(tanh_, tanh_)
FD_UNARY_INPLACE(sigmoid_, sigmoid_)
FD_UNARY_INPLACE(reciprocal_, reciprocal_)
FD_UNARY_INPLACE(sign_, sign_)
FD_UNARY_INPLACE(floor_, floor_)
FD_UNARY_INPLACE(ceil_, ceil_)
FD_UNARY_INPLACE(round_, round_)
FD_UNARY_INPLACE(trunc_, trunc_)
FD_UNARY_INPLACE(frac_, frac_)
FD_UNARY_INPLACE(square_, square_)
FD_UNARY_INPLACE(bitwise_not_, bitwise_not_)
FD_UNARY_INPLACE(relu_, relu_)
FD_UNARY_INPLACE(selu_, selu_)
// NB: logical_not_ writes bools into self's dtype, so its rule is the input's own dtype.
FD_UNARY_INPLACE(logical_not_, logical_not_)
#undef FD_UNARY
#undef FD_UNARY_INPLACE

// Activations and unary ops with parameters: one row each, Python signature as in torch.
#define FD_UNARY_ROW(fam, sig, op, iop, ...)                                                    \
  CaptureResult bind_##fam(BindCall& c) {                                                       \
    static const UnaryOp u{Signature(sig), OpId::op, OpId::iop, {__VA_ARGS__}};                 \
    return record_unary(c, u);                                                                  \
  }
#define FD_UNARY_ROW_INPLACE(fam, sig, iop, ...)                                                \
  CaptureResult bind_##fam(BindCall& c) {                                                       \
    static const UnaryOp u{Signature(sig), OpId::iop, OpId::iop, {__VA_ARGS__}, true};          \
    return record_unary(c, u);                                                                  \
  }

FD_UNARY_ROW(relu, "relu(Tensor input, bool inplace=False)", relu, relu_)
FD_UNARY_ROW(relu6, "relu6(Tensor input, bool inplace=False)", relu6, kCount)
FD_UNARY_ROW(gelu, "gelu(Tensor input, str approximate='none')", gelu, kCount, "approximate")
FD_UNARY_ROW(silu, "silu(Tensor input, bool inplace=False)", silu, silu_)
FD_UNARY_ROW(mish, "mish(Tensor input, bool inplace=False)", mish, mish_)
FD_UNARY_ROW(elu, "elu(Tensor input, Number alpha=1.0, bool inplace=False)", elu, elu_, "alpha", "=1",
             "=1")
FD_UNARY_ROW(selu, "selu(Tensor input, bool inplace=False)", selu, selu_)
FD_UNARY_ROW(celu, "celu(Tensor input, Number alpha=1.0, bool inplace=False)", celu, celu_, "alpha")
FD_UNARY_ROW(leaky_relu, "leaky_relu(Tensor input, Number negative_slope=0.01, bool inplace=False)", leaky_relu,
             leaky_relu_, "negative_slope")
FD_UNARY_ROW(hardtanh, "hardtanh(Tensor input, Number min_val=-1.0, Number max_val=1.0, bool inplace=False)",
             hardtanh, hardtanh_, "min_val", "max_val")
FD_UNARY_ROW(hardsigmoid, "hardsigmoid(Tensor input, bool inplace=False)", hardsigmoid, hardsigmoid_)
FD_UNARY_ROW(hardswish, "hardswish(Tensor input, bool inplace=False)", hardswish, hardswish_)
FD_UNARY_ROW(softplus, "softplus(Tensor input, Number beta=1, Number threshold=20)", softplus, kCount,
             "beta", "threshold")
FD_UNARY_ROW(threshold, "threshold(Tensor input, Number threshold, Number value, bool inplace=False)", threshold,
             threshold_, "threshold", "value")
FD_UNARY_ROW(nan_to_num, "nan_to_num(Tensor input, float? nan=None, float? posinf=None, float? neginf=None)",
             nan_to_num, nan_to_num_, "nan", "posinf", "neginf")
FD_UNARY_ROW_INPLACE(nan_to_num_, "nan_to_num_(Tensor self, float? nan=None, float? posinf=None, float? neginf=None)",
                     nan_to_num_, "nan", "posinf", "neginf")
FD_UNARY_ROW_INPLACE(elu_, "elu_(Tensor self, Number alpha=1.0)", elu_, "alpha", "=1", "=1")
FD_UNARY_ROW_INPLACE(celu_, "celu_(Tensor self, Number alpha=1.0)", celu_, "alpha")
FD_UNARY_ROW_INPLACE(leaky_relu_, "leaky_relu_(Tensor self, Number negative_slope=0.01)", leaky_relu_,
                     "negative_slope")
FD_UNARY_ROW_INPLACE(hardtanh_, "hardtanh_(Tensor self, Number min_val=-1.0, Number max_val=1.0)", hardtanh_, "min_val", "max_val")
FD_UNARY_ROW_INPLACE(threshold_, "threshold_(Tensor self, Number threshold, Number value)", threshold_,
                     "threshold", "value")
#undef FD_UNARY_ROW
#undef FD_UNARY_ROW_INPLACE

// `+x` is x itself in eager (no copy), so nothing is recorded.
CaptureResult bind_positive(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "positive(Tensor input)");
  ValueId x = a.tensor("input");
  if (c.graph.meta(x).dtype == ST::Bool)
    return CaptureResult::fail("positive: the + operator on a bool tensor is not supported");
  return tensor_result(x);
}

// F.softsign and F.tanhshrink are Python compositions in eager; record the same ops.
CaptureResult bind_softsign(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "softsign(Tensor input)");
  const CallArg& x = a.get("input");
  CaptureResult ab = record_call(c.graph, c.ctx, Family::abs, {x}, {});
  if (!ab.ok) return CaptureResult::fail("softsign: " + ab.reason);
  CaptureResult den = record_binary(c, kAdd, CallArg::tensor(ab.values[0]), CallArg::of_int(1), {Arg::of_int(1)});
  if (!den.ok) return CaptureResult::fail("softsign: " + den.reason);
  CaptureResult r = record_binary(c, kDiv, x, CallArg::tensor(den.values[0]), {});
  if (!r.ok) r.reason = "softsign: " + r.reason;
  return r;
}

CaptureResult bind_tanhshrink(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "tanhshrink(Tensor input)");
  const CallArg& x = a.get("input");
  CaptureResult t = record_call(c.graph, c.ctx, Family::tanh, {x}, {});
  if (!t.ok) return CaptureResult::fail("tanhshrink: " + t.reason);
  CaptureResult r = record_binary(c, kSub, x, CallArg::tensor(t.values[0]), {Arg::of_int(1)});
  if (!r.ok) r.reason = "tanhshrink: " + r.reason;
  return r;
}

// glu halves `dim`; eager runs a TensorIterator over the two halves (views of the input).
CaptureResult bind_glu(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "glu(Tensor input, int dim=-1)");
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  if (m.dim() == 0) return CaptureResult::fail("glu: does not support scalars because halving size must be even");
  auto d = wrap_dim(a.integer("dim"), m.dim());
  if (!d) return CaptureResult::fail("glu: dim " + std::to_string(a.integer("dim")) + " out of range for a " +
                                     std::to_string(m.dim()) + "-d tensor");
  if (m.sizes[*d] % 2 != 0)
    return CaptureResult::fail("glu: halving dimension must be even, but dimension " + std::to_string(*d) +
                               " is size " + std::to_string(m.sizes[*d]));
  Plan p;
  CallArg xa = CallArg::tensor(x);
  if (auto err = plan_elementwise(c, "glu", OpId::glu, {&xa}, p)) return CaptureResult::fail(*err);
  TensorMeta half = m;
  half.sizes[*d] /= 2;
  p.shape = half.sizes;
  p.strides = tensor_iterator_strides(p.shape, {&half, &half});
  return tensor_result(emit1(c.graph, OpId::glu, {Arg::of_value(x), Arg::of_int(*d)}, p.meta()));
}

// ---- where, masked_fill, clamp, lerp, addcmul, addcdiv ----------------------------------------

namespace {

CaptureResult record_where(BindCall& c, const CallArg& cond, const CallArg& x, const CallArg& y) {
  if (!is_tensor(cond)) return CaptureResult::fail("where: argument 'condition' must be a Tensor");
  if (c.graph.meta(cond.value).dtype != ST::Bool)
    return CaptureResult::fail("where: expected condition to be a boolean tensor, but got a tensor with dtype " +
                               dtype_name(c.graph.meta(cond.value).dtype));
  Plan p;
  if (auto err = plan_elementwise(c, "where", OpId::where_self, {&cond, &x, &y}, p)) return CaptureResult::fail(*err);
  // The condition takes no part in promotion.
  std::vector<DtypeOperand> d;
  for (const CallArg* v : {&x, &y}) {
    if (is_tensor(*v)) d.push_back({c.graph.meta(v->value).dtype, c.graph.meta(v->value).dim() == 0, false});
    else d.push_back({scalar_dtype(*v), true, true});
  }
  p.out = result_type(d, c.ctx.default_dtype);
  Arg cx = Arg::of_value(cond.value);
  auto arg = [&](const CallArg& v) { return is_tensor(v) ? Arg::of_value(v.value) : scalar_arg(v); };
  OpId op = is_tensor(x) ? (is_tensor(y) ? OpId::where_self : OpId::where_ScalarOther)
                         : (is_tensor(y) ? OpId::where_ScalarSelf : OpId::where_Scalar);
  return tensor_result(emit1(c.graph, op, {cx, arg(x), arg(y)}, p.meta()));
}

// Shared by masked_fill and masked_fill_: validates mask and value.
std::optional<std::string> check_masked_fill(const BindCall& c, const char* op, ValueId mask, const CallArg& value) {
  if (c.graph.meta(mask).dtype != ST::Bool)
    return std::string(op) + ": only supports boolean masks, but got mask with dtype " +
           dtype_name(c.graph.meta(mask).dtype);
  if (is_tensor(value) && c.graph.meta(value.value).dim() != 0)
    return std::string(op) + ": only supports a 0-dimensional value tensor, but got tensor with " +
           std::to_string(c.graph.meta(value.value).dim()) + " dimension(s)";
  return std::nullopt;
}

}  // namespace

CaptureResult bind_where(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "where(Tensor condition, Tensor|Number input, Tensor|Number other)");
  return record_where(c, a.get("condition"), a.get("input"), a.get("other"));
}

// x.where(condition, y) == torch.where(condition, x, y)
CaptureResult bind_where_method(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "where(Tensor self, Tensor condition, Tensor|Number other)");
  return record_where(c, a.get("condition"), a.get("self"), a.get("other"));
}

// Eager expands self and mask together and fills a contiguous clone.
CaptureResult bind_masked_fill(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "masked_fill(Tensor input, Tensor mask, Tensor|Number value)");
  ValueId x = a.tensor("input"), mask = a.tensor("mask");
  const CallArg& v = a.get("value");
  if (auto err = check_masked_fill(c, "masked_fill", mask, v)) return CaptureResult::fail(*err);
  const TensorMeta& m = c.graph.meta(x);
  auto shape = broadcast_shapes({m.sizes, c.graph.meta(mask).sizes});
  if (!shape)
    return CaptureResult::fail("masked_fill: mask of shape " + shape_str(c.graph.meta(mask).sizes) +
                               " does not broadcast with input of shape " + shape_str(m.sizes));
  std::vector<ValueId> ins{x, mask};
  if (is_tensor(v)) ins.push_back(v.value);
  TensorMeta out = contiguous_meta(m.dtype, m.device, *shape, any_requires_grad(c.graph, c.ctx, ins));
  OpId op = is_tensor(v) ? OpId::masked_fill_Tensor : OpId::masked_fill_Scalar;
  return tensor_result(emit1(c.graph, op, {Arg::of_value(x), Arg::of_value(mask), const_arg(v)}, out));
}

CaptureResult bind_masked_fill_(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "masked_fill_(Tensor self, Tensor mask, Tensor|Number value)");
  ValueId x = a.tensor("self"), mask = a.tensor("mask");
  const CallArg& v = a.get("value");
  if (auto err = check_masked_fill(c, "masked_fill_", mask, v)) return CaptureResult::fail(*err);
  const TensorMeta& m = c.graph.meta(x);
  auto shape = broadcast_shapes({m.sizes, c.graph.meta(mask).sizes});
  if (!shape || *shape != m.sizes)
    return CaptureResult::fail("masked_fill_: mask of shape " + shape_str(c.graph.meta(mask).sizes) +
                               " does not broadcast to self of shape " + shape_str(m.sizes));
  TensorMeta out = m;
  std::vector<ValueId> ins{x, mask};
  if (is_tensor(v)) ins.push_back(v.value);
  out.requires_grad = any_requires_grad(c.graph, c.ctx, ins) || m.requires_grad;
  OpId op = is_tensor(v) ? OpId::masked_fill__Tensor : OpId::masked_fill__Scalar;
  return tensor_result(emit1(c.graph, op, {Arg::of_value(x), Arg::of_value(mask), const_arg(v)}, out));
}

// Tensor.copy_: src broadcast to self's shape and cast to its dtype, written in place.
// fill_(value) / zero_(): every element of self set to a number (cast to self's dtype, as ATen
// does) or to a 0-dim tensor's value.
CaptureResult record_fill_(BindCall& c, ValueId self, const CallArg& value) {
  const TensorMeta& m = c.graph.meta(self);
  if (is_tensor(value)) {
    const TensorMeta& v = c.graph.meta(value.value);
    if (v.dim() != 0)
      return CaptureResult::fail("fill_ only supports 0-dimension value tensor but got tensor with " +
                                 std::to_string(v.dim()) + " dimensions.");
    return tensor_result(emit1(c.graph, OpId::fill__Tensor, {Arg::of_value(self), Arg::of_value(value.value)}, m));
  }
  return tensor_result(emit1(c.graph, OpId::fill__Scalar, {Arg::of_value(self), scalar_arg(value)}, m));
}

CaptureResult bind_fill_(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "fill_(Tensor self, Tensor|Number value)");
  return record_fill_(c, a.tensor("self"), a.get("value"));
}

CaptureResult bind_zero_(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "zero_(Tensor self)");
  return record_fill_(c, a.tensor("self"), CallArg::of_int(0));
}

CaptureResult bind_copy_(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "copy_(Tensor self, Tensor src, bool non_blocking=False)");
  ValueId x = a.tensor("self"), src = a.tensor("src");
  const TensorMeta& m = c.graph.meta(x);
  const TensorMeta& sm = c.graph.meta(src);
  auto shape = broadcast_shapes({m.sizes, sm.sizes});
  if (!shape || *shape != m.sizes)
    return CaptureResult::fail("copy_: src of shape " + shape_str(sm.sizes) + " does not broadcast to self of shape " +
                               shape_str(m.sizes));
  if (sm.device != m.device) return CaptureResult::fail("copy_ across devices");
  TensorMeta out = m;
  out.requires_grad = m.requires_grad || any_requires_grad(c.graph, c.ctx, {src});
  return tensor_result(emit1(c.graph, OpId::copy_, {Arg::of_value(x), Arg::of_value(src), Arg::of_bool(a.boolean("non_blocking"))}, out));
}

namespace {

// clamp with number bounds promotes like a binary op but lays out like a unary one; with tensor
// bounds it is a ternary TensorIterator op.
CaptureResult record_clamp(BindCall& c, const CallArg& x, const CallArg& lo, const CallArg& hi, bool inplace) {
  const char* name = inplace ? "clamp_" : "clamp";
  if (lo.kind == K::None && hi.kind == K::None)
    return CaptureResult::fail(std::string(name) + ": at least one of 'min' or 'max' must not be None");
  bool tensors = is_tensor(lo) || is_tensor(hi);
  if (tensors && ((lo.kind != K::None && !is_tensor(lo)) || (hi.kind != K::None && !is_tensor(hi))))
    return CaptureResult::fail(std::string(name) + ": mixing a tensor and a number for 'min'/'max' is not supported");
  std::vector<const CallArg*> ops{&x};
  if (lo.kind != K::None) ops.push_back(&lo);
  if (hi.kind != K::None) ops.push_back(&hi);
  Plan p;
  if (auto err = plan_elementwise(c, name, tensors ? OpId::clamp_Tensor : OpId::clamp, ops, p)) return CaptureResult::fail(*err);
  if (!tensors) {
    const TensorMeta& m = c.graph.meta(x.value);
    if (is_floating(m.dtype)) p.out = m.dtype;
    p.shape = m.sizes;
    p.strides = tensor_iterator_strides(m.sizes, {&m});
    if (inplace && p.out != m.dtype)
      return CaptureResult::fail(std::string(name) + ": result type " + dtype_name(p.out) +
                                 " can't be cast to the desired input type " + dtype_name(m.dtype));
  }
  auto bound = [&](const CallArg& b) {
    if (b.kind == K::None) return Arg::none();
    return is_tensor(b) ? Arg::of_value(b.value) : scalar_arg(b);
  };
  std::vector<Arg> args{Arg::of_value(x.value), bound(lo), bound(hi)};
  if (!inplace) return tensor_result(emit1(c.graph, tensors ? OpId::clamp_Tensor : OpId::clamp, args, p.meta()));
  if (auto err = check_inplace(c, name, x.value, p)) return CaptureResult::fail(*err);
  return tensor_result(
      emit1(c.graph, tensors ? OpId::clamp__Tensor : OpId::clamp_, args, inplace_meta(c, x.value, p)));
}

}  // namespace

CaptureResult bind_clamp(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "clamp(Tensor input, Tensor|Number? min=None, Tensor|Number? max=None)");
  return record_clamp(c, a.get("input"), a.get("min"), a.get("max"), false);
}

CaptureResult bind_clamp_(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "clamp_(Tensor self, Tensor|Number? min=None, Tensor|Number? max=None)");
  return record_clamp(c, a.get("self"), a.get("min"), a.get("max"), true);
}

// clamp_min(x, v) / clamp_max(x, v) are clamp with one bound: same values, dtypes and layout.
CaptureResult bind_clamp_min(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "clamp_min(Tensor input, Tensor|Number min)");
  return record_clamp(c, a.get("input"), a.get("min"), CallArg::none(), false);
}

CaptureResult bind_clamp_max(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "clamp_max(Tensor input, Tensor|Number max)");
  return record_clamp(c, a.get("input"), CallArg::none(), a.get("max"), false);
}

// lerp does not promote: end (and a tensor weight) must have input's dtype. lerp_ writes into input.
namespace {
CaptureResult record_lerp(BindCall& c, const BoundArgs& a, bool inplace) {
  const char* name = inplace ? "lerp_" : "lerp";
  const CallArg &x = a.get("input"), &end = a.get("end"), &w = a.get("weight");
  ST dt = c.graph.meta(x.value).dtype;
  for (const CallArg* o : {&end, &w})
    if (is_tensor(*o) && c.graph.meta(o->value).dtype != dt)
      return CaptureResult::fail("lerp: expected dtype " + dtype_name(dt) + " for '" +
                                 (o == &end ? "end" : "weight") + "' but got dtype " +
                                 dtype_name(c.graph.meta(o->value).dtype));
  std::vector<const CallArg*> ops{&x, &end};
  if (is_tensor(w)) ops.push_back(&w);
  Plan p;
  if (auto err = plan_elementwise(c, name, is_tensor(w) ? OpId::lerp_Tensor : OpId::lerp_Scalar, ops, p)) return CaptureResult::fail(*err);
  p.out = dt;
  if (inplace)
    if (auto err = check_inplace(c, name, x.value, p)) return CaptureResult::fail(*err);
  const OpId op = is_tensor(w) ? (inplace ? OpId::lerp__Tensor : OpId::lerp_Tensor) : (inplace ? OpId::lerp__Scalar : OpId::lerp_Scalar);
  return tensor_result(emit1(c.graph, op, {Arg::of_value(x.value), Arg::of_value(end.value), is_tensor(w) ? Arg::of_value(w.value) : scalar_arg(w)},
                             inplace ? inplace_meta(c, x.value, p) : p.meta()));
}
}  // namespace

CaptureResult bind_lerp(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "lerp(Tensor input, Tensor end, Tensor|Number weight)");
  return record_lerp(c, a, false);
}
CaptureResult bind_lerp_(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "lerp_(Tensor input, Tensor end, Tensor|Number weight)");
  return record_lerp(c, a, true);
}

namespace {
// addcmul/addcdiv (op: the out-of-place row) and their in-place forms (inplace_op), which write
// into input.
CaptureResult record_addc(BindCall& c, const Signature& sig, OpId op, OpId inplace_op, bool is_div) {
  const bool inplace = inplace_op != kNoOp;
  const char* name = is_div ? (inplace ? "addcdiv_" : "addcdiv") : (inplace ? "addcmul_" : "addcmul");
  // A 0-d tensor as `value` (tensor_as_number): input + value * (tensor1 op tensor2), written into
  // input for the in-place form.
  if (const CallArg* value = tensor_as_number(c, "value"); value && c.args.size() == 3) {
    CaptureResult q = record_call(c.graph, c.ctx, is_div ? Family::div : Family::mul, {c.args[1], c.args[2]}, {});
    if (!q.ok) return CaptureResult::fail(std::string(name) + ": " + q.reason);
    CaptureResult scaled = record_call(c.graph, c.ctx, Family::mul, {CallArg::tensor(q.values.at(0)), *value}, {});
    if (!scaled.ok) return CaptureResult::fail(std::string(name) + ": " + scaled.reason);
    return record_call(c.graph, c.ctx, inplace ? Family::add_ : Family::add, {c.args[0], CallArg::tensor(scaled.values.at(0))}, {});
  }
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  const CallArg &x = a.get("input"), &t1 = a.get("tensor1"), &t2 = a.get("tensor2");
  if (is_div && is_integral(c.graph.meta(t1.value).dtype, true) && is_integral(c.graph.meta(t2.value).dtype, true))
    return CaptureResult::fail(std::string(name) + ": integer division with addcdiv is no longer supported");
  Plan p;
  if (auto err = plan_elementwise(c, name, op, {&x, &t1, &t2}, p)) return CaptureResult::fail(*err);
  if (inplace)
    if (auto err = check_inplace(c, name, x.value, p)) return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, inplace ? inplace_op : op,
                             {Arg::of_value(x.value), Arg::of_value(t1.value), Arg::of_value(t2.value),
                              scalar_arg(a.get("value"))},
                             inplace ? inplace_meta(c, x.value, p) : p.meta()));
}
}  // namespace

CaptureResult bind_addcmul(BindCall& c) {
  static const Signature sig("addcmul(Tensor input, Tensor tensor1, Tensor tensor2, *, Number value=1)");
  return record_addc(c, sig, OpId::addcmul, kNoOp, false);
}
CaptureResult bind_addcdiv(BindCall& c) {
  static const Signature sig("addcdiv(Tensor input, Tensor tensor1, Tensor tensor2, *, Number value=1)");
  return record_addc(c, sig, OpId::addcdiv, kNoOp, true);
}
CaptureResult bind_addcmul_(BindCall& c) {
  static const Signature sig("addcmul_(Tensor input, Tensor tensor1, Tensor tensor2, *, Number value=1)");
  return record_addc(c, sig, OpId::addcmul, OpId::addcmul_, false);
}
CaptureResult bind_addcdiv_(BindCall& c) {
  static const Signature sig("addcdiv_(Tensor input, Tensor tensor1, Tensor tensor2, *, Number value=1)");
  return record_addc(c, sig, OpId::addcdiv, OpId::addcdiv_, true);
}

// torch.isin(elements, test_elements): per element of `elements`, whether it is among
// test_elements (a tensor of the same dtype and device, or a number), as a contiguous bool tensor
// of elements' shape. Run by ATen between the kernels (transformers' stopping criteria call it
// at every decode step).
CaptureResult bind_isin(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "isin(Tensor elements, Tensor|Number test_elements, *, bool assume_unique=False, bool invert=False)");
  const ValueId x = a.tensor("elements");
  const TensorMeta m = c.graph.meta(x);  // NB: a copy: recording the 0-d test tensor adds values
  const CallArg& t = a.get("test_elements");
  ValueId test = -1;
  if (t.kind == K::Tensor) {
    test = t.value;
  } else {  // a number: a 0-d tensor of elements' dtype, as ATen's Tensor_Scalar overload makes
    CaptureResult s = record_call(c.graph, c.ctx, Family::full, {CallArg::of_ints({}), t},
                                  {{"dtype", CallArg::of_dtype(m.dtype)}, {"device", CallArg::of_device(m.device)}});
    if (!s.ok) return CaptureResult::fail("isin: " + s.reason);
    test = s.values.at(0);
  }
  const TensorMeta& mt = c.graph.meta(test);
  if (mt.dtype != m.dtype) return CaptureResult::fail("isin: elements and test_elements of different dtypes");
  if (!(mt.device == m.device)) return CaptureResult::fail("isin: elements and test_elements on different devices");
  if (m.dtype == ST::Bool || c10::isComplexType(m.dtype)) return CaptureResult::fail("isin: not implemented for '" + dtype_name(m.dtype) + "'");
  return tensor_result(emit1(c.graph, OpId::isin_Tensor_Tensor,
                             {Arg::of_value(x), Arg::of_value(test), Arg::of_bool(a.boolean("assume_unique")),
                              Arg::of_bool(a.boolean("invert"))},
                             contiguous_meta(ST::Bool, m.device, m.sizes, false)));
}

}  // namespace fastdyn::codegen
