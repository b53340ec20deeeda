// codegen/loop/lowering.cpp — lower: each graph node becomes a pointwise definition, a view, a
// set of kernels, or an Extern step.
//
// Composite ops are decomposed here into the small scalar op set of loop_ir.h (gelu into erf or
// tanh, silu into exp, softmax into max / sum-of-exp / store stages...). One table row per OpId
// that has a lowering; an op without a row, or with a dtype the loops cannot compute, stays an
// Extern (ATen computes it, correctly, op by op). A graph that cannot run outside ATen at all
// (autograd, a non-CPU device, a mutation functionalize cannot express) throws Unsupported.
#include "codegen/loop/passes.h"

#include "codegen/meta_rules.h"
#include "runtime/errors.h"

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>

namespace fastdyn::codegen::loop {
namespace {

using ST = c10::ScalarType;

// ---- stage building --------------------------------------------------------------------------

class Builder {
 public:
  explicit Builder(int64_t dims) : dims_(dims) {}
  Stage st;

  ST type(int32_t x) const { return st.instrs.at(static_cast<size_t>(x)).type; }
  int32_t emit(Op op, ST t, int32_t a = -1, int32_t b = -1, int32_t c = -1, double v = 0) {
    Instr in;
    in.op = op;
    in.type = t;
    in.a = a;
    in.b = b;
    in.c = c;
    in.value = v;
    st.instrs.push_back(in);
    return static_cast<int32_t>(st.instrs.size() - 1);
  }
  int32_t load(Access a, ST t) {
    st.loads.push_back(std::move(a));
    return emit(Op::Load, t, static_cast<int32_t>(st.loads.size() - 1));
  }
  int32_t cnst(double v, ST t) { return emit(Op::Const, t, -1, -1, -1, v); }
  int32_t cast(int32_t x, ST t) { return type(x) == t ? x : emit(Op::Cast, t, x); }
  int32_t un(Op op, int32_t x) { return emit(op, type(x), x); }
  int32_t bin(Op op, int32_t x, int32_t y) {
    FD_CHECK(type(x) == type(y), "loop lowering: binary operands of different types");
    bool cmp = op == Op::Lt || op == Op::Le || op == Op::Gt || op == Op::Ge || op == Op::Eq || op == Op::Ne;
    return emit(op, cmp ? ST::Bool : type(x), x, y);
  }
  int32_t add(int32_t x, int32_t y) { return bin(Op::Add, x, y); }
  int32_t sub(int32_t x, int32_t y) { return bin(Op::Sub, x, y); }
  int32_t mul(int32_t x, int32_t y) { return bin(Op::Mul, x, y); }
  int32_t div(int32_t x, int32_t y) { return bin(Op::Div, x, y); }
  int32_t sel(int32_t c, int32_t x, int32_t y) {
    FD_CHECK(type(c) == ST::Bool && type(x) == type(y), "loop lowering: bad select");
    return emit(Op::Select, type(x), c, x, y);
  }
  int32_t k(double v, int32_t like) { return cnst(v, type(like)); }
  int32_t fma(int32_t x, int32_t y, int32_t z) {
    FD_CHECK(type(x) == type(y) && type(y) == type(z), "loop lowering: fma operands of different types");
    return emit(Op::Fma, type(x), x, y, z);
  }
  int64_t dims() const { return dims_; }

 private:
  int64_t dims_;
};

AffineIndex dim_index(int64_t dims, int64_t d, int64_t coef = 1, int64_t constant = 0) {
  AffineIndex ix;
  ix.coef.assign(static_cast<size_t>(dims), 0);
  if (d >= 0) ix.coef[static_cast<size_t>(d)] = coef;
  ix.constant = constant;
  return ix;
}

// The broadcast map of a value of `sizes` read at every point of an `out_rank`-dim domain whose
// dims line up with the value's from the right (size-1 dims read index 0).
Access broadcast_access(ValueId v, const std::vector<int64_t>& sizes, int64_t out_rank) {
  Access a;
  a.value = v;
  const int64_t shift = out_rank - static_cast<int64_t>(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k)
    a.index.push_back(sizes[k] == 1 ? dim_index(out_rank, -1) : dim_index(out_rank, static_cast<int64_t>(k) + shift));
  return a;
}

// ---- per-node context ------------------------------------------------------------------------

struct Ctx {
  const Graph& g;
  const Node& n;
  const TensorMeta& out() const { return g.meta(n.outputs.at(0)); }
  const TensorMeta& meta(size_t arg) const { return g.meta(n.args.at(arg).value); }
  bool is_value(size_t arg) const { return arg < n.args.size() && n.args[arg].kind == Arg::Kind::Value; }
  bool is_none(size_t arg) const { return arg >= n.args.size() || n.args[arg].kind == Arg::Kind::None; }
  double scalar(size_t arg, double dflt = 0) const {
    if (arg >= n.args.size()) return dflt;
    const Arg& a = n.args[arg];
    switch (a.kind) {
      case Arg::Kind::Int: return static_cast<double>(a.i);
      case Arg::Kind::Double: return a.d;
      case Arg::Kind::Bool: return a.b ? 1 : 0;
      case Arg::Kind::None: return dflt;
      default: throw Unsupported("argument " + std::to_string(arg) + " is not a number");
    }
  }
  bool scalar_is_float(size_t arg) const { return arg < n.args.size() && n.args[arg].kind == Arg::Kind::Double; }
};

// Loads argument `arg` (a tensor broadcast to the output, or a number) as type t.
int32_t operand(Builder& b, const Ctx& c, size_t arg, ST t) {
  if (c.is_value(arg)) {
    const TensorMeta& m = c.meta(arg);
    int32_t x = b.load(broadcast_access(c.n.args[arg].value, m.sizes, b.dims()), compute_type(m.dtype));
    return b.cast(x, t);
  }
  return b.cnst(c.scalar(arg), t);
}

// The type two operands are compared / combined in (result_type over them).
ST common_type(const Ctx& c, std::vector<size_t> args) {
  std::vector<DtypeOperand> ops;
  for (size_t a : args) {
    if (c.is_value(a)) {
      const TensorMeta& m = c.meta(a);
      ops.push_back({m.dtype, m.dim() == 0, false});
    } else {
      const Arg& x = c.n.args.at(a);
      ST t = x.kind == Arg::Kind::Double ? ST::Double : x.kind == Arg::Kind::Bool ? ST::Bool : ST::Long;
      ops.push_back({t, true, true});
    }
  }
  return result_type(ops, ST::Float);
}

bool is_float(ST t) { return t == ST::Float || t == ST::Double || t == ST::BFloat16 || t == ST::Half; }

// x (of the compute type of `storage`) rounded as eager rounds a value stored as `storage`.
int32_t rounded(Builder& b, int32_t x, ST storage) {
  if (storage == ST::BFloat16) return b.un(Op::RoundBF16, x);
  if (storage == ST::Half) return b.un(Op::RoundF16, x);
  return x;
}

// ---- the pointwise table ---------------------------------------------------------------------
// A rule builds the body and returns the result instr (of the output's compute type, or any type:
// the caller casts). Returning -1 means "no lowering for these dtypes" (the node stays Extern).

using PointwiseRule = std::function<int32_t(Builder&, const Ctx&, ST /*compute type of output*/)>;

int32_t unary_math(Builder& b, const Ctx& c, ST t, Op op) {
  if (!is_float(c.out().dtype)) return -1;
  return b.un(op, operand(b, c, 0, t));
}

int32_t softplus_of(Builder& b, int32_t x, double beta, double threshold) {
  int32_t xb = b.mul(x, b.k(beta, x));
  int32_t soft = b.div(b.un(Op::Log1p, b.un(Op::Exp, xb)), b.k(beta, x));
  return b.sel(b.bin(Op::Gt, xb, b.k(threshold, x)), x, soft);
}

// erf in f32 as ATen's vectorised CPU kernel computes it (Abramowitz & Stegun 7.1.26, |error|
// < 1.5e-7): a polynomial in t = 1 / (1 + p|x|) times exp(-x^2), which is several times cheaper
// than SLEEF's 1-ULP erf. f64 keeps SLEEF.
int32_t erf_of(Builder& b, int32_t x) {
  if (b.type(x) != ST::Float) return b.un(Op::Erf, x);
  int32_t ax = b.un(Op::Abs, x);
  int32_t t = b.un(Op::Recip, b.add(b.k(1, x), b.mul(b.k(0.3275911, x), ax)));
  int32_t poly = b.k(1.061405429, x);
  for (double c : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) poly = b.fma(poly, t, b.k(c, x));
  poly = b.mul(poly, t);
  int32_t y = b.sub(b.k(1, x), b.mul(poly, b.un(Op::Exp, b.un(Op::Neg, b.mul(x, x)))));
  return b.sel(b.bin(Op::Lt, x, b.k(0, x)), b.un(Op::Neg, y), y);
}

int32_t sigmoid_of(Builder& b, int32_t x) {
  return b.div(b.k(1, x), b.add(b.k(1, x), b.un(Op::Exp, b.un(Op::Neg, x))));
}

int32_t arith(Builder& b, const Ctx& c, ST t, Op op, bool alpha) {
  int32_t x = operand(b, c, 0, t), y = operand(b, c, 1, t);
  if (alpha && c.scalar(2, 1) != 1) y = b.mul(y, b.cnst(c.scalar(2, 1), t));
  return b.bin(op, x, y);
}

int32_t compare(Builder& b, const Ctx& c, Op op) {
  ST ct = compute_type(common_type(c, {0, 1}));
  if (ct == ST::Undefined) return -1;
  return b.bin(op, operand(b, c, 0, ct), operand(b, c, 1, ct));
}

int32_t logical(Builder& b, const Ctx& c, Op op) {
  auto as_bool = [&](size_t i) {
    int32_t x = operand(b, c, i, compute_type(c.meta(i).dtype));
    return b.type(x) == ST::Bool ? x : b.bin(Op::Ne, x, b.k(0, x));
  };
  return b.bin(op, as_bool(0), as_bool(1));
}

int32_t bitwise(Builder& b, const Ctx& c, ST t, Op op) {
  if (is_float(c.out().dtype)) return -1;
  return b.bin(op, operand(b, c, 0, t), operand(b, c, 1, t));
}

int32_t pow_scalar_exponent(Builder& b, int32_t x, double e) {
  if (e == 1) return x;
  if (e == 2) return b.mul(x, x);
  if (e == 3) return b.mul(b.mul(x, x), x);
  if (e == 0.5) return b.un(Op::Sqrt, x);
  if (e == -1) return b.un(Op::Recip, x);
  if (e == -2) return b.un(Op::Recip, b.mul(x, x));
  if (e == -0.5) return b.un(Op::Rsqrt, x);
  return b.bin(Op::Pow, x, b.k(e, x));
}

double max_finite(ST t) {
  switch (t) {
    case ST::Double: return std::numeric_limits<double>::max();
    case ST::BFloat16: return 3.3895313892515355e+38;
    case ST::Half: return 65504.0;
    default: return std::numeric_limits<float>::max();
  }
}

// ---- integer and floored division ----------------------------------------------------------------
// ATen raises on an integer division by zero, which generated code cannot: an integer quotient or
// remainder is lowered only when the divisor is a non-zero number known at compile time (a tensor
// divisor keeps the node on ATen). A divisor of -1 never reaches sdiv/srem (INT_MIN / -1 traps).

enum class DivKind : uint8_t { True, Trunc, Floor, Remainder, Fmod };

// The divisor of argument `arg` when it is a non-zero integer number, else nullopt.
std::optional<int64_t> int_divisor(const Ctx& c, size_t arg) {
  if (c.is_value(arg) || arg >= c.n.args.size()) return std::nullopt;
  const Arg& a = c.n.args[arg];
  int64_t v = a.kind == Arg::Kind::Int ? a.i : a.kind == Arg::Kind::Bool ? int64_t{a.b} : 0;
  if (v == 0) return std::nullopt;
  return v;
}

int32_t int_division(Builder& b, const Ctx& c, ST t, DivKind kind) {
  if (t != ST::Long && t != ST::Int) return -1;
  std::optional<int64_t> d = int_divisor(c, 1);
  if (!d) return -1;
  int32_t x = operand(b, c, 0, t);
  if (*d == -1) {  // exact, without the trapping INT_MIN / -1
    if (kind == DivKind::Remainder || kind == DivKind::Fmod) return b.cnst(0, t);
    return b.un(Op::Neg, x);
  }
  int32_t y = b.cnst(static_cast<double>(*d), t);
  int32_t zero = b.cnst(0, t);
  // A non-zero truncated remainder whose sign differs from the divisor's: the floored quotient is
  // one less, the floored remainder one divisor more.
  auto differs = [&](int32_t r) {
    return b.bin(Op::And, b.bin(Op::Ne, r, zero), b.bin(Op::Ne, b.bin(Op::Lt, r, zero), b.cnst(*d < 0, ST::Bool)));
  };
  switch (kind) {
    case DivKind::Trunc: return b.div(x, y);
    case DivKind::Fmod: return b.bin(Op::Fmod, x, y);
    case DivKind::Floor: {
      int32_t q = b.div(x, y);
      return b.sel(differs(b.bin(Op::Fmod, x, y)), b.sub(q, b.cnst(1, t)), q);
    }
    case DivKind::Remainder: {
      int32_t r = b.bin(Op::Fmod, x, y);
      return b.sel(differs(r), b.add(r, y), r);
    }
    case DivKind::True: break;
  }
  return -1;
}

// Floating point, as ATen's scalar and vector kernels: trunc(a / b); fmod; remainder = fmod moved
// to the divisor's sign; floor division from fmod (exact where floor(a / b) would round), with
// IEEE a / b for b == 0 and a signed zero for a zero quotient.
int32_t float_division(Builder& b, const Ctx& c, ST t, DivKind kind) {
  int32_t x = operand(b, c, 0, t), y = operand(b, c, 1, t);
  int32_t zero = b.k(0, x);
  auto differs = [&](int32_t r) {
    return b.bin(Op::And, b.bin(Op::Ne, r, zero), b.bin(Op::Ne, b.bin(Op::Lt, y, zero), b.bin(Op::Lt, r, zero)));
  };
  switch (kind) {
    case DivKind::True: return b.div(x, y);
    case DivKind::Trunc: return b.un(Op::Trunc, b.div(x, y));
    case DivKind::Fmod: return b.bin(Op::Fmod, x, y);
    case DivKind::Remainder: {
      int32_t r = b.bin(Op::Fmod, x, y);
      return b.sel(differs(r), b.add(r, y), r);
    }
    case DivKind::Floor: {
      int32_t q = b.div(x, y);
      int32_t r = b.bin(Op::Fmod, x, y);
      int32_t d = b.div(b.sub(x, r), y);
      d = b.sel(differs(r), b.sub(d, b.k(1, x)), d);
      int32_t f = b.un(Op::Floor, d);
      f = b.sel(b.bin(Op::Gt, b.sub(d, f), b.k(0.5, x)), b.add(f, b.k(1, x)), f);
      int32_t signed_zero = b.sel(b.bin(Op::Lt, q, zero), b.k(-0.0, x), b.sel(b.bin(Op::Gt, q, zero), zero, q));
      f = b.sel(b.bin(Op::Eq, d, zero), signed_zero, f);
      return b.sel(b.bin(Op::Eq, y, zero), q, f);
    }
  }
  return -1;
}

int32_t division(Builder& b, const Ctx& c, ST t, DivKind kind) {
  if (t == ST::Bool) return -1;
  // ATen rounds a 16-bit quotient before truncating or flooring it: not modelled, stays on ATen.
  const ST out = c.out().dtype;
  if ((out == ST::BFloat16 || out == ST::Half) && (kind == DivKind::Trunc || kind == DivKind::Floor)) return -1;
  return is_float(c.out().dtype) ? float_division(b, c, t, kind) : int_division(b, c, t, kind);
}

// div(a, b, rounding_mode=None | "trunc" | "floor").
int32_t div_mode(Builder& b, const Ctx& c, ST t) {
  if (c.is_none(2)) return (is_float(c.out().dtype) ? division(b, c, t, DivKind::True) : -1);
  if (c.n.args[2].kind != Arg::Kind::String) return -1;
  const std::string& mode = c.n.args[2].str;
  if (mode == "trunc") return division(b, c, t, DivKind::Trunc);
  if (mode == "floor") return division(b, c, t, DivKind::Floor);
  return -1;
}

// Shifts of integers, with ATen's rule for counts out of [0, bits) in the Shl/Shr ops.
int32_t shift(Builder& b, const Ctx& c, ST t, Op op) {
  if (t != ST::Long && t != ST::Int) return -1;
  return b.bin(op, operand(b, c, 0, t), operand(b, c, 1, t));
}

struct PointwiseRow {
  OpId op;
  PointwiseRule rule;
};

#define FD_U(id, op) {OpId::id, [](Builder& b, const Ctx& c, ST t) { return unary_math(b, c, t, Op::op); }}
#define FD_CMP(id, op) {OpId::id, [](Builder& b, const Ctx& c, ST) { return compare(b, c, Op::op); }}
#define FD_FLOAT_ONLY(expr) (is_float(c.out().dtype) ? (expr) : -1)

const std::vector<PointwiseRow>& pointwise_rows() {
  static const std::vector<PointwiseRow> rows = {
      {OpId::add_Tensor, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Add, true); }},
      {OpId::add_Scalar, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Add, true); }},
      {OpId::sub_Tensor, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Sub, true); }},
      {OpId::sub_Scalar, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Sub, true); }},
      {OpId::rsub_Scalar, [](Builder& b, const Ctx& c, ST t) {
         int32_t x = operand(b, c, 0, t), y = operand(b, c, 1, t);
         if (c.scalar(2, 1) != 1) x = b.mul(x, b.cnst(c.scalar(2, 1), t));
         return b.sub(y, x);
       }},
      {OpId::mul_Tensor, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Mul, false); }},
      {OpId::mul_Scalar, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Mul, false); }},
      // Integer division stays in ATen: it raises on division by zero, generated code would trap.
      {OpId::div_Tensor, [](Builder& b, const Ctx& c, ST t) { return FD_FLOAT_ONLY(arith(b, c, t, Op::Div, false)); }},
      {OpId::div_Scalar, [](Builder& b, const Ctx& c, ST t) { return FD_FLOAT_ONLY(arith(b, c, t, Op::Div, false)); }},
      {OpId::div_Tensor_mode, div_mode},
      {OpId::div_Scalar_mode, div_mode},
      {OpId::floor_divide, [](Builder& b, const Ctx& c, ST t) { return division(b, c, t, DivKind::Floor); }},
      {OpId::floor_divide_Scalar, [](Builder& b, const Ctx& c, ST t) { return division(b, c, t, DivKind::Floor); }},
      {OpId::remainder_Tensor, [](Builder& b, const Ctx& c, ST t) { return division(b, c, t, DivKind::Remainder); }},
      {OpId::remainder_Scalar, [](Builder& b, const Ctx& c, ST t) { return division(b, c, t, DivKind::Remainder); }},
      {OpId::fmod_Tensor, [](Builder& b, const Ctx& c, ST t) { return division(b, c, t, DivKind::Fmod); }},
      {OpId::fmod_Scalar, [](Builder& b, const Ctx& c, ST t) { return division(b, c, t, DivKind::Fmod); }},
      {OpId::bitwise_left_shift_Tensor, [](Builder& b, const Ctx& c, ST t) { return shift(b, c, t, Op::Shl); }},
      {OpId::bitwise_left_shift_Tensor_Scalar, [](Builder& b, const Ctx& c, ST t) { return shift(b, c, t, Op::Shl); }},
      {OpId::bitwise_right_shift_Tensor, [](Builder& b, const Ctx& c, ST t) { return shift(b, c, t, Op::Shr); }},
      {OpId::bitwise_right_shift_Tensor_Scalar, [](Builder& b, const Ctx& c, ST t) { return shift(b, c, t, Op::Shr); }},
      {OpId::maximum, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Max, false); }},
      {OpId::minimum, [](Builder& b, const Ctx& c, ST t) { return arith(b, c, t, Op::Min, false); }},
      {OpId::atan2, [](Builder& b, const Ctx& c, ST t) { return FD_FLOAT_ONLY(arith(b, c, t, Op::Atan2, false)); }},
      {OpId::pow_Tensor_Tensor, [](Builder& b, const Ctx& c, ST t) { return FD_FLOAT_ONLY(arith(b, c, t, Op::Pow, false)); }},
      {OpId::pow_Scalar, [](Builder& b, const Ctx& c, ST t) { return FD_FLOAT_ONLY(arith(b, c, t, Op::Pow, false)); }},
      {OpId::pow_Tensor_Scalar, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         return pow_scalar_exponent(b, operand(b, c, 0, t), c.scalar(1));
       }},
      FD_CMP(eq_Tensor, Eq), FD_CMP(eq_Scalar, Eq), FD_CMP(ne_Tensor, Ne), FD_CMP(ne_Scalar, Ne),
      FD_CMP(lt_Tensor, Lt), FD_CMP(lt_Scalar, Lt), FD_CMP(le_Tensor, Le), FD_CMP(le_Scalar, Le),
      FD_CMP(gt_Tensor, Gt), FD_CMP(gt_Scalar, Gt), FD_CMP(ge_Tensor, Ge), FD_CMP(ge_Scalar, Ge),
      {OpId::logical_and, [](Builder& b, const Ctx& c, ST) { return logical(b, c, Op::And); }},
      {OpId::logical_or, [](Builder& b, const Ctx& c, ST) { return logical(b, c, Op::Or); }},
      {OpId::logical_xor, [](Builder& b, const Ctx& c, ST) { return logical(b, c, Op::Xor); }},
      {OpId::logical_not, [](Builder& b, const Ctx& c, ST) {
         int32_t x = operand(b, c, 0, compute_type(c.meta(0).dtype));
         return b.type(x) == ST::Bool ? b.un(Op::Not, x) : b.bin(Op::Eq, x, b.k(0, x));
       }},
      {OpId::bitwise_and_Tensor, [](Builder& b, const Ctx& c, ST t) { return bitwise(b, c, t, Op::And); }},
      {OpId::bitwise_and_Scalar, [](Builder& b, const Ctx& c, ST t) { return bitwise(b, c, t, Op::And); }},
      {OpId::bitwise_or_Tensor, [](Builder& b, const Ctx& c, ST t) { return bitwise(b, c, t, Op::Or); }},
      {OpId::bitwise_or_Scalar, [](Builder& b, const Ctx& c, ST t) { return bitwise(b, c, t, Op::Or); }},
      {OpId::bitwise_xor_Tensor, [](Builder& b, const Ctx& c, ST t) { return bitwise(b, c, t, Op::Xor); }},
      {OpId::bitwise_xor_Scalar, [](Builder& b, const Ctx& c, ST t) { return bitwise(b, c, t, Op::Xor); }},
      {OpId::bitwise_not, [](Builder& b, const Ctx& c, ST t) {
         if (is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         return t == ST::Bool ? b.un(Op::Not, x) : b.bin(Op::Xor, x, b.k(-1, x));
       }},
      {OpId::where_self, [](Builder& b, const Ctx& c, ST t) {
         return b.sel(operand(b, c, 0, ST::Bool), operand(b, c, 1, t), operand(b, c, 2, t));
       }},
      {OpId::where_ScalarOther, [](Builder& b, const Ctx& c, ST t) {
         return b.sel(operand(b, c, 0, ST::Bool), operand(b, c, 1, t), operand(b, c, 2, t));
       }},
      {OpId::where_ScalarSelf, [](Builder& b, const Ctx& c, ST t) {
         return b.sel(operand(b, c, 0, ST::Bool), operand(b, c, 1, t), operand(b, c, 2, t));
       }},
      {OpId::where_Scalar, [](Builder& b, const Ctx& c, ST t) {
         return b.sel(operand(b, c, 0, ST::Bool), operand(b, c, 1, t), operand(b, c, 2, t));
       }},
      {OpId::masked_fill_Scalar, [](Builder& b, const Ctx& c, ST t) {
         return b.sel(operand(b, c, 1, ST::Bool), operand(b, c, 2, t), operand(b, c, 0, t));
       }},
      {OpId::masked_fill_Tensor, [](Builder& b, const Ctx& c, ST t) {
         return b.sel(operand(b, c, 1, ST::Bool), operand(b, c, 2, t), operand(b, c, 0, t));
       }},
      {OpId::clamp, [](Builder& b, const Ctx& c, ST t) {
         int32_t x = operand(b, c, 0, t);
         if (!c.is_none(1)) x = b.bin(Op::Max, x, operand(b, c, 1, t));
         if (!c.is_none(2)) x = b.bin(Op::Min, x, operand(b, c, 2, t));
         return x;
       }},
      {OpId::clamp_Tensor, [](Builder& b, const Ctx& c, ST t) {
         int32_t x = operand(b, c, 0, t);
         if (!c.is_none(1)) x = b.bin(Op::Max, x, operand(b, c, 1, t));
         if (!c.is_none(2)) x = b.bin(Op::Min, x, operand(b, c, 2, t));
         return x;
       }},
      {OpId::clamp_min, [](Builder& b, const Ctx& c, ST t) { return b.bin(Op::Max, operand(b, c, 0, t), operand(b, c, 1, t)); }},
      {OpId::lerp_Scalar, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t s = operand(b, c, 0, t), e = operand(b, c, 1, t), w = operand(b, c, 2, t);
         int32_t d = b.sub(e, s);
         return b.sel(b.bin(Op::Lt, b.un(Op::Abs, w), b.k(0.5, w)), b.add(s, b.mul(w, d)),
                      b.sub(e, b.mul(d, b.sub(b.k(1, w), w))));
       }},
      {OpId::lerp_Tensor, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t s = operand(b, c, 0, t), e = operand(b, c, 1, t), w = operand(b, c, 2, t);
         int32_t d = b.sub(e, s);
         return b.sel(b.bin(Op::Lt, b.un(Op::Abs, w), b.k(0.5, w)), b.add(s, b.mul(w, d)),
                      b.sub(e, b.mul(d, b.sub(b.k(1, w), w))));
       }},
      {OpId::addcmul, [](Builder& b, const Ctx& c, ST t) {
         int32_t p = b.mul(operand(b, c, 1, t), operand(b, c, 2, t));
         return b.add(operand(b, c, 0, t), b.mul(b.cnst(c.scalar(3, 1), t), p));
       }},
      {OpId::addcdiv, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t q = b.div(operand(b, c, 1, t), operand(b, c, 2, t));
         return b.add(operand(b, c, 0, t), b.mul(b.cnst(c.scalar(3, 1), t), q));
       }},
      {OpId::abs, [](Builder& b, const Ctx& c, ST t) { return b.un(Op::Abs, operand(b, c, 0, t)); }},
      {OpId::neg, [](Builder& b, const Ctx& c, ST t) { return t == ST::Bool ? -1 : b.un(Op::Neg, operand(b, c, 0, t)); }},
      FD_U(exp, Exp), FD_U(log, Log), FD_U(log2, Log2), FD_U(log10, Log10), FD_U(log1p, Log1p),
      FD_U(expm1, Expm1), FD_U(sqrt, Sqrt), FD_U(rsqrt, Rsqrt), FD_U(sin, Sin), FD_U(cos, Cos),
      FD_U(tan, Tan), FD_U(asin, Asin), FD_U(acos, Acos), FD_U(atan, Atan), FD_U(sinh, Sinh),
      FD_U(cosh, Cosh), FD_U(tanh, Tanh), FD_U(erfc, Erfc), FD_U(reciprocal, Recip),
      {OpId::exp2, [](Builder& b, const Ctx& c, ST t) {
         return FD_FLOAT_ONLY(b.bin(Op::Pow, b.cnst(2, t), operand(b, c, 0, t)));
       }},
      {OpId::erf, [](Builder& b, const Ctx& c, ST t) { return FD_FLOAT_ONLY(erf_of(b, operand(b, c, 0, t))); }},
      {OpId::sigmoid, [](Builder& b, const Ctx& c, ST t) { return FD_FLOAT_ONLY(sigmoid_of(b, operand(b, c, 0, t))); }},
      {OpId::floor, [](Builder& b, const Ctx& c, ST t) { int32_t x = operand(b, c, 0, t); return is_float(c.out().dtype) ? b.un(Op::Floor, x) : x; }},
      {OpId::ceil, [](Builder& b, const Ctx& c, ST t) { int32_t x = operand(b, c, 0, t); return is_float(c.out().dtype) ? b.un(Op::Ceil, x) : x; }},
      {OpId::round, [](Builder& b, const Ctx& c, ST t) {
         if (c.n.args.size() > 1) return -1;  // round(decimals=...)
         int32_t x = operand(b, c, 0, t);
         return is_float(c.out().dtype) ? b.un(Op::Round, x) : x;
       }},
      {OpId::trunc, [](Builder& b, const Ctx& c, ST t) { int32_t x = operand(b, c, 0, t); return is_float(c.out().dtype) ? b.un(Op::Trunc, x) : x; }},
      {OpId::frac, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         return b.sub(x, b.un(Op::Trunc, x));
       }},
      {OpId::square, [](Builder& b, const Ctx& c, ST t) { int32_t x = operand(b, c, 0, t); return t == ST::Bool ? -1 : b.mul(x, x); }},
      {OpId::isnan, [](Builder& b, const Ctx& c, ST) {
         ST it = compute_type(c.meta(0).dtype);
         int32_t x = operand(b, c, 0, it);
         return is_float(c.meta(0).dtype) ? b.un(Op::IsNan, x) : b.cnst(0, ST::Bool);
       }},
      {OpId::isinf, [](Builder& b, const Ctx& c, ST) {
         ST it = compute_type(c.meta(0).dtype);
         if (!is_float(c.meta(0).dtype)) return b.cnst(0, ST::Bool);
         int32_t x = operand(b, c, 0, it);
         return b.bin(Op::Eq, b.un(Op::Abs, x), b.k(INFINITY, x));
       }},
      {OpId::isfinite, [](Builder& b, const Ctx& c, ST) {
         ST it = compute_type(c.meta(0).dtype);
         if (!is_float(c.meta(0).dtype)) return b.cnst(1, ST::Bool);
         int32_t x = operand(b, c, 0, it);
         return b.bin(Op::Lt, b.un(Op::Abs, x), b.k(INFINITY, x));
       }},
      {OpId::nan_to_num, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         ST d = c.out().dtype;
         int32_t x = operand(b, c, 0, t);
         int32_t nan = b.cnst(c.scalar(1, 0), t);
         int32_t pos = b.cnst(c.is_none(2) ? max_finite(d) : c.scalar(2), t);
         int32_t neg = b.cnst(c.is_none(3) ? -max_finite(d) : c.scalar(3), t);
         x = b.sel(b.un(Op::IsNan, x), nan, x);
         x = b.sel(b.bin(Op::Eq, x, b.k(INFINITY, x)), pos, x);
         return b.sel(b.bin(Op::Eq, x, b.k(-INFINITY, x)), neg, x);
       }},
      {OpId::relu, [](Builder& b, const Ctx& c, ST t) { return t == ST::Bool ? -1 : b.bin(Op::Max, operand(b, c, 0, t), b.cnst(0, t)); }},
      {OpId::relu6, [](Builder& b, const Ctx& c, ST t) {
         return b.bin(Op::Min, b.bin(Op::Max, operand(b, c, 0, t), b.cnst(0, t)), b.cnst(6, t));
       }},
      {OpId::hardtanh, [](Builder& b, const Ctx& c, ST t) {
         return b.bin(Op::Min, b.bin(Op::Max, operand(b, c, 0, t), b.cnst(c.scalar(1, -1), t)), b.cnst(c.scalar(2, 1), t));
       }},
      {OpId::gelu, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         bool tanh = c.n.args.size() > 1 && c.n.args[1].kind == Arg::Kind::String && c.n.args[1].str == "tanh";
         int32_t inner;
         if (tanh) {
           int32_t x3 = b.mul(b.mul(x, x), x);
           int32_t u = b.mul(b.k(std::sqrt(2.0 / M_PI), x), b.add(x, b.mul(b.k(0.044715, x), x3)));
           inner = b.un(Op::Tanh, u);
         } else {
           inner = erf_of(b, b.mul(x, b.k(M_SQRT1_2, x)));
         }
         return b.mul(b.mul(b.k(0.5, x), x), b.add(b.k(1, x), inner));
       }},
      {OpId::silu, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         return b.div(x, b.add(b.k(1, x), b.un(Op::Exp, b.un(Op::Neg, x))));
       }},
      {OpId::mish, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         return b.mul(x, b.un(Op::Tanh, softplus_of(b, x, 1, 20)));
       }},
      {OpId::elu, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         double alpha = c.scalar(1, 1), scale = c.scalar(2, 1), in_scale = c.scalar(3, 1);
         int32_t neg = b.mul(b.k(alpha * scale, x), b.un(Op::Expm1, b.mul(x, b.k(in_scale, x))));
         return b.sel(b.bin(Op::Gt, x, b.k(0, x)), b.mul(x, b.k(scale, x)), neg);
       }},
      {OpId::leaky_relu, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         return b.sel(b.bin(Op::Gt, x, b.k(0, x)), x, b.mul(x, b.k(c.scalar(1, 0.01), x)));
       }},
      {OpId::hardsigmoid, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         int32_t r = b.bin(Op::Min, b.bin(Op::Max, b.add(x, b.k(3, x)), b.k(0, x)), b.k(6, x));
         return b.div(r, b.k(6, x));
       }},
      {OpId::hardswish, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         int32_t r = b.bin(Op::Min, b.bin(Op::Max, b.add(x, b.k(3, x)), b.k(0, x)), b.k(6, x));
         return b.div(b.mul(x, r), b.k(6, x));
       }},
      {OpId::softplus, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         return softplus_of(b, operand(b, c, 0, t), c.scalar(1, 1), c.scalar(2, 20));
       }},
      {OpId::log_sigmoid, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         int32_t tail = b.un(Op::Log1p, b.un(Op::Exp, b.un(Op::Neg, b.un(Op::Abs, x))));
         return b.sub(b.bin(Op::Min, x, b.k(0, x)), tail);
       }},
      {OpId::threshold, [](Builder& b, const Ctx& c, ST t) {
         int32_t x = operand(b, c, 0, t);
         return b.sel(b.bin(Op::Le, x, b.cnst(c.scalar(1), t)), b.cnst(c.scalar(2), t), x);
       }},
      {OpId::clone, [](Builder& b, const Ctx& c, ST t) { return operand(b, c, 0, t); }},
      {OpId::_to_copy, [](Builder& b, const Ctx& c, ST t) {
         // Only a dtype change on the CPU: layout / device / pinning stay ATen's business.
         if (!c.is_none(2)) return -1;
         if (!c.is_none(3) && !(c.n.args[3].kind == Arg::Kind::Device && c.n.args[3].device.is_cpu())) return -1;
         if (!c.is_none(4) && !(c.n.args[4].kind == Arg::Kind::Bool && !c.n.args[4].b)) return -1;
         return b.cast(operand(b, c, 0, compute_type(c.meta(0).dtype)), t);
       }},
  };
  return rows;
}
#undef FD_U
#undef FD_CMP
#undef FD_FLOAT_ONLY

const PointwiseRule* find_pointwise(OpId op) {
  static const std::unordered_map<int, const PointwiseRule*> index = [] {
    std::unordered_map<int, const PointwiseRule*> m;
    for (const PointwiseRow& r : pointwise_rows()) m[static_cast<int>(r.op)] = &r.rule;
    return m;
  }();
  auto it = index.find(static_cast<int>(op));
  return it == index.end() ? nullptr : it->second;
}

// ---- views -----------------------------------------------------------------------------------

// Base index as affine over view dims, for the view ops that are affine; nullopt otherwise.
std::optional<std::vector<AffineIndex>> view_map(const Graph& g, const Node& n, size_t out_index) {
  const TensorMeta& base = g.meta(n.args.at(0).value);
  const TensorMeta& view = g.meta(n.outputs.at(out_index));
  const int64_t vr = view.dim(), br = base.dim();
  auto arg_int = [&](size_t a, int64_t dflt) { return a < n.args.size() && n.args[a].kind == Arg::Kind::Int ? n.args[a].i : dflt; };
  auto wrapped = [&](int64_t d, int64_t rank) { return *wrap_dim(d, rank); };
  std::vector<AffineIndex> m;
  switch (n.op) {
    case OpId::alias:
      for (int64_t k = 0; k < br; ++k) m.push_back(dim_index(vr, k));
      return m;
    case OpId::permute: {
      m.resize(static_cast<size_t>(br));
      const std::vector<int64_t>& dims = n.args.at(1).ints;
      for (int64_t j = 0; j < vr; ++j) m[static_cast<size_t>(wrapped(dims[static_cast<size_t>(j)], br))] = dim_index(vr, j);
      return m;
    }
    case OpId::transpose_int: {
      int64_t d0 = wrapped(arg_int(1, 0), br), d1 = wrapped(arg_int(2, 0), br);
      for (int64_t k = 0; k < br; ++k) m.push_back(dim_index(vr, k == d0 ? d1 : k == d1 ? d0 : k));
      return m;
    }
    case OpId::expand: {
      const int64_t shift = vr - br;
      for (int64_t k = 0; k < br; ++k)
        m.push_back(base.sizes[static_cast<size_t>(k)] == 1 ? dim_index(vr, -1) : dim_index(vr, k + shift));
      return m;
    }
    case OpId::squeeze:
    case OpId::squeeze_dim:
    case OpId::squeeze_dims:
    case OpId::unsqueeze: {
      // Both only add or drop size-1 dims: walk the two size lists, matching non-1 sizes in order.
      int64_t j = 0;
      for (int64_t k = 0; k < br; ++k) {
        int64_t s = base.sizes[static_cast<size_t>(k)];
        if (n.op == OpId::unsqueeze) {
          int64_t d = wrapped(arg_int(1, 0), vr);
          if (j == d) ++j;
          m.push_back(dim_index(vr, j++));
          continue;
        }
        if (s == 1) {
          // dropped unless the view kept it (same count of dims remaining)
          if (vr - j > br - k - 1 && j < vr && view.sizes[static_cast<size_t>(j)] == 1) {
            m.push_back(dim_index(vr, j++));
          } else {
            m.push_back(dim_index(vr, -1));
          }
          continue;
        }
        while (j < vr && view.sizes[static_cast<size_t>(j)] != s) ++j;
        if (j >= vr) return std::nullopt;
        m.push_back(dim_index(vr, j++));
      }
      return m;
    }
    case OpId::select_int: {
      int64_t d = wrapped(arg_int(1, 0), br);
      int64_t i = arg_int(2, 0);
      if (i < 0) i += base.sizes[static_cast<size_t>(d)];
      for (int64_t k = 0; k < br; ++k)
        m.push_back(k == d ? dim_index(vr, -1, 0, i) : dim_index(vr, k < d ? k : k - 1));
      return m;
    }
    case OpId::slice_Tensor: {
      int64_t d = wrapped(arg_int(1, 0), br);
      const int64_t size = base.sizes[static_cast<size_t>(d)];
      int64_t start = arg_int(2, 0), step = arg_int(4, 1);
      if (start < 0) start += size;
      start = std::min(std::max<int64_t>(start, 0), size);
      for (int64_t k = 0; k < br; ++k) m.push_back(k == d ? dim_index(vr, k, step, start) : dim_index(vr, k));
      return m;
    }
    case OpId::split_Tensor:
    case OpId::split_with_sizes:
    case OpId::tensor_split_sections:
    case OpId::tensor_split_indices:
    case OpId::unbind_int: {
      const size_t dim_arg = n.op == OpId::unbind_int ? 1 : 2;
      int64_t d = wrapped(arg_int(dim_arg, 0), br);
      int64_t start = 0;
      for (size_t o = 0; o < out_index; ++o)
        start += n.op == OpId::unbind_int ? 1 : g.meta(n.outputs[o]).sizes[static_cast<size_t>(d)];
      for (int64_t k = 0; k < br; ++k) {
        if (n.op == OpId::unbind_int) m.push_back(k == d ? dim_index(vr, -1, 0, start) : dim_index(vr, k < d ? k : k - 1));
        else m.push_back(k == d ? dim_index(vr, k, 1, start) : dim_index(vr, k));
      }
      return m;
    }
    default: return std::nullopt;
  }
}

// ---- reductions and normalisations -----------------------------------------------------------

// A kernel over `full` with the dims in `mask` inner (natural order) and the rest outer.
struct Domain {
  std::vector<int64_t> full;
  std::vector<bool> mask;
  KernelDef def;
  int64_t inner_numel = 1;

  Domain(const std::vector<int64_t>& sizes, const std::vector<bool>& reduce) : full(sizes), mask(reduce) {
    std::vector<int32_t> pos(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d)
      if (!reduce[d]) { pos[d] = static_cast<int32_t>(def.kernel.outer.size()); def.kernel.outer.push_back(sizes[d]); }
    for (size_t d = 0; d < sizes.size(); ++d)
      if (reduce[d]) {
        pos[d] = static_cast<int32_t>(def.kernel.outer.size() + def.kernel.inner.size());
        def.kernel.inner.push_back(sizes[d]);
        inner_numel *= sizes[d];
      }
    def.full = sizes;
    def.full_to_dom = pos;
  }
  int64_t dims() const { return static_cast<int64_t>(full.size()); }
  // A value of the full shape (or broadcastable to it from the right) read at each domain point.
  Access full_access(ValueId v, const std::vector<int64_t>& sizes) const {
    Access a;
    a.value = v;
    const int64_t shift = dims() - static_cast<int64_t>(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) {
      int64_t d = static_cast<int64_t>(k) + shift;
      a.index.push_back(sizes[k] == 1 && full[static_cast<size_t>(d)] != 1
                            ? dim_index(dims(), -1)
                            : dim_index(dims(), def.full_to_dom[static_cast<size_t>(d)]));
    }
    return a;
  }
  // A reduced value (keepdim or not) stored per outer point.
  Access reduced_access(ValueId v, const TensorMeta& m) const {
    Access a;
    a.value = v;
    bool keep = m.dim() == dims() && dims() > 0;
    for (size_t d = 0; d < full.size(); ++d) {
      if (mask[d]) {
        if (keep) a.index.push_back(dim_index(dims(), -1));
      } else {
        a.index.push_back(dim_index(dims(), def.full_to_dom[d]));
      }
    }
    if (a.index.size() != static_cast<size_t>(m.dim())) throw Unsupported("reduced shape mismatch");
    return a;
  }
  Stage& stage(bool per_outer) {
    def.kernel.stages.emplace_back();
    def.kernel.stages.back().per_outer = per_outer;
    return def.kernel.stages.back();
  }
};

int32_t reduction_count(const Kernel& k) {
  int32_t n = 0;
  for (const Stage& s : k.stages) n += static_cast<int32_t>(s.reductions.size());
  return n;
}

void finish(Domain& dom, Builder& b) {
  Stage& s = dom.stage(b.st.per_outer);
  b.st.per_outer = s.per_outer;
  s = std::move(b.st);
}

Builder begin(const Domain& dom, bool per_outer) {
  Builder b(dom.dims());
  b.st.per_outer = per_outer;
  return b;
}

std::vector<bool> dims_mask(const Ctx& c, size_t arg, int64_t rank) {
  std::vector<int64_t> dims;
  if (!c.is_none(arg)) {
    const Arg& a = c.n.args[arg];
    if (a.kind == Arg::Kind::IntList) dims = a.ints;
    else if (a.kind == Arg::Kind::Int) dims = {a.i};
  }
  std::vector<bool> mask;
  if (auto err = reduction_mask("reduce", dims, rank, mask)) throw Unsupported(*err);
  return mask;
}

// sum / mean / prod / amax / amin / max / min: one reduction, one per-outer store.
bool lower_simple_reduction(const Ctx& c, NodeLowering& out, ReduceOp op, bool mean, size_t dim_arg, bool all_dims) {
  const TensorMeta& in = c.meta(0);
  const TensorMeta& res = c.out();
  ST acc = compute_type(res.dtype);
  if (acc == ST::Undefined || compute_type(in.dtype) == ST::Undefined) return false;
  if ((op == ReduceOp::Max || op == ReduceOp::Min) && acc == ST::Bool) return false;
  std::vector<bool> mask = all_dims ? std::vector<bool>(in.sizes.size(), true) : dims_mask(c, dim_arg, in.dim());
  Domain dom(in.sizes, mask);
  if ((op == ReduceOp::Max || op == ReduceOp::Min) && dom.inner_numel == 0) return false;  // ATen raises
  Builder b0 = begin(dom, false);
  int32_t x = b0.cast(b0.load(dom.full_access(c.n.args[0].value, in.sizes), compute_type(in.dtype)), acc);
  b0.st.reductions.push_back({op, x, acc});
  finish(dom, b0);
  Builder b1 = begin(dom, true);
  int32_t r = b1.emit(Op::Reduced, acc, 0);
  if (mean) r = b1.div(r, b1.cnst(static_cast<double>(dom.inner_numel), acc));
  b1.st.stores.push_back({rounded(b1, r, res.dtype), dom.reduced_access(c.n.outputs[0], res)});
  finish(dom, b1);
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// any / all: a count of the elements that are non-zero (any) or zero (all), so that an empty
// reduction gives False / True. The count is i32 when it cannot overflow, for wider vectors.
bool lower_any_all(const Ctx& c, NodeLowering& out, bool is_all) {
  const TensorMeta& in = c.meta(0);
  const TensorMeta& res = c.out();
  ST it = compute_type(in.dtype);
  if (it == ST::Undefined || res.dtype != ST::Bool) return false;
  Domain dom(in.sizes, dims_mask(c, 1, in.dim()));
  const ST count = dom.inner_numel < (int64_t{1} << 31) ? ST::Int : ST::Long;
  Builder b0 = begin(dom, false);
  int32_t x = b0.load(dom.full_access(c.n.args[0].value, in.sizes), it);
  int32_t hit = it == ST::Bool ? (is_all ? b0.un(Op::Not, x) : x) : b0.bin(is_all ? Op::Eq : Op::Ne, x, b0.k(0, x));
  b0.st.reductions.push_back({ReduceOp::Sum, b0.cast(hit, count), count});
  finish(dom, b0);
  Builder b1 = begin(dom, true);
  int32_t n = b1.emit(Op::Reduced, count, 0);
  int32_t r = b1.bin(is_all ? Op::Eq : Op::Ne, n, b1.cnst(0, count));
  b1.st.stores.push_back({r, dom.reduced_access(c.n.outputs[0], res)});
  finish(dom, b1);
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// cumsum along one dim: a scan stage over that dim. As ATen, the input is first converted to the
// result dtype, and the running sum is kept in its accumulate type (f64 for f32, f32 for 16-bit
// floats, i64 for integers), rounded to the result at every point.
bool lower_cumsum(const Ctx& c, NodeLowering& out) {
  const TensorMeta& in = c.meta(0);
  const TensorMeta& res = c.out();
  const ST rt = compute_type(res.dtype);
  if (in.dim() == 0 || rt == ST::Undefined || rt == ST::Bool || compute_type(in.dtype) == ST::Undefined) return false;
  const ST acc = res.dtype == ST::Float ? ST::Double : (rt == ST::Int ? ST::Long : rt);
  std::vector<bool> mask(in.sizes.size(), false);
  mask[static_cast<size_t>(*wrap_dim(c.n.args.at(1).i, in.dim()))] = true;
  Domain dom(in.sizes, mask);
  Builder b = begin(dom, false);
  int32_t x = rounded(b, b.cast(b.load(dom.full_access(c.n.args[0].value, in.sizes), compute_type(in.dtype)), rt), res.dtype);
  int32_t run = b.emit(Op::CumSum, acc, b.cast(x, acc));
  b.st.stores.push_back({rounded(b, b.cast(run, rt), res.dtype), dom.full_access(c.n.outputs[0], res.sizes)});
  finish(dom, b);
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// max.dim / min.dim / argmax / argmin.
bool lower_arg_reduction(const Ctx& c, NodeLowering& out, bool is_max, bool values_too) {
  const TensorMeta& in = c.meta(0);
  ST t = compute_type(in.dtype);
  if (t == ST::Undefined || t == ST::Bool) return false;
  std::vector<bool> mask = dims_mask(c, 1, in.dim());
  Domain dom(in.sizes, mask);
  if (dom.inner_numel == 0) return false;
  Builder b0 = begin(dom, false);
  int32_t x = b0.load(dom.full_access(c.n.args[0].value, in.sizes), t);
  if (values_too) b0.st.reductions.push_back({is_max ? ReduceOp::Max : ReduceOp::Min, x, t});
  b0.st.reductions.push_back({is_max ? ReduceOp::ArgMax : ReduceOp::ArgMin, x, ST::Long});
  finish(dom, b0);
  Builder b1 = begin(dom, true);
  size_t o = 0;
  if (values_too) {
    int32_t v = b1.emit(Op::Reduced, t, 0);
    b1.st.stores.push_back({v, dom.reduced_access(c.n.outputs[o], c.g.meta(c.n.outputs[o]))});
    ++o;
  }
  int32_t i = b1.emit(Op::Reduced, ST::Long, values_too ? 1 : 0);
  b1.st.stores.push_back({i, dom.reduced_access(c.n.outputs[o], c.g.meta(c.n.outputs[o]))});
  finish(dom, b1);
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// var / std (+ _mean): mean stage, squared-deviation stage, per-outer stores.
bool lower_variance(const Ctx& c, NodeLowering& out, bool is_std, bool with_mean) {
  const TensorMeta& in = c.meta(0);
  ST t = compute_type(c.out().dtype);
  if (!is_float(in.dtype) || t == ST::Undefined) return false;
  Domain dom(in.sizes, dims_mask(c, 1, in.dim()));
  const double n = static_cast<double>(dom.inner_numel);
  const double correction = c.is_none(2) ? 1.0 : c.scalar(2);
  Builder b0 = begin(dom, false);
  int32_t x0 = b0.load(dom.full_access(c.n.args[0].value, in.sizes), t);
  b0.st.reductions.push_back({ReduceOp::Sum, x0, t});
  finish(dom, b0);
  Builder b1 = begin(dom, false);
  int32_t x1 = b1.load(dom.full_access(c.n.args[0].value, in.sizes), t);
  int32_t mean1 = b1.div(b1.emit(Op::Reduced, t, 0), b1.cnst(n, t));
  int32_t d = b1.sub(x1, mean1);
  b1.st.reductions.push_back({ReduceOp::Sum, b1.mul(d, d), t});
  finish(dom, b1);
  Builder b2 = begin(dom, true);
  int32_t var = b2.div(b2.emit(Op::Reduced, t, 1), b2.cnst(std::max(n - correction, 0.0), t));
  if (is_std) var = b2.un(Op::Sqrt, var);
  b2.st.stores.push_back({rounded(b2, var, c.out().dtype), dom.reduced_access(c.n.outputs[0], c.g.meta(c.n.outputs[0]))});
  if (with_mean) {
    int32_t mean = b2.div(b2.emit(Op::Reduced, t, 0), b2.cnst(n, t));
    b2.st.stores.push_back({rounded(b2, mean, c.g.meta(c.n.outputs[1]).dtype), dom.reduced_access(c.n.outputs[1], c.g.meta(c.n.outputs[1]))});
  }
  finish(dom, b2);
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// softmax / log_softmax over one dim: max stage, sum-of-exp stage, store stage.
bool lower_softmax(const Ctx& c, NodeLowering& out, bool log) {
  const TensorMeta& in = c.meta(0);
  const TensorMeta& res = c.out();
  ST t = compute_type(res.dtype);
  if (!is_float(res.dtype) || compute_type(in.dtype) == ST::Undefined) return false;
  std::vector<bool> mask(in.sizes.size(), false);
  if (in.dim() > 0) mask[static_cast<size_t>(*wrap_dim(c.n.args.at(1).i, in.dim()))] = true;
  Domain dom(in.sizes, mask);
  ValueId x = c.n.args[0].value;
  Builder b0 = begin(dom, false);
  b0.st.reductions.push_back({ReduceOp::MaxLoose, b0.cast(b0.load(dom.full_access(x, in.sizes), compute_type(in.dtype)), t), t});
  finish(dom, b0);
  // softmax in f32/f64 keeps exp(x - max) in the output between the sum and the scaling (one
  // exp per element, as ATen); 16-bit outputs recompute it, as storing would round it early.
  const bool keep_exp = !log && (res.dtype == ST::Float || res.dtype == ST::Double);
  const Access out_at = dom.full_access(c.n.outputs[0], res.sizes);
  Builder b1 = begin(dom, false);
  int32_t d1 = b1.sub(b1.cast(b1.load(dom.full_access(x, in.sizes), compute_type(in.dtype)), t), b1.emit(Op::Reduced, t, 0));
  int32_t e1 = b1.un(Op::Exp, d1);
  b1.st.reductions.push_back({ReduceOp::Sum, e1, t});
  if (keep_exp) b1.st.stores.push_back({e1, out_at});
  finish(dom, b1);
  Builder b2 = begin(dom, false);
  int32_t s = b2.emit(Op::Reduced, t, 1);
  int32_t r;
  if (keep_exp) {
    r = b2.mul(b2.load(out_at, t), b2.un(Op::Recip, s));
  } else {
    int32_t d2 = b2.sub(b2.cast(b2.load(dom.full_access(x, in.sizes), compute_type(in.dtype)), t), b2.emit(Op::Reduced, t, 0));
    r = log ? b2.sub(d2, b2.un(Op::Log, s)) : b2.div(b2.un(Op::Exp, d2), s);
  }
  b2.st.stores.push_back({rounded(b2, r, res.dtype), out_at});
  finish(dom, b2);
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// logsumexp: as ATen, an infinite max is replaced by 0 before the shifted sum.
bool lower_logsumexp(const Ctx& c, NodeLowering& out) {
  const TensorMeta& in = c.meta(0);
  ST t = compute_type(c.out().dtype);
  if (!is_float(c.out().dtype) || compute_type(in.dtype) == ST::Undefined) return false;
  Domain dom(in.sizes, dims_mask(c, 1, in.dim()));
  ValueId x = c.n.args[0].value;
  auto shifted_max = [&](Builder& b) {
    int32_t m = b.emit(Op::Reduced, t, 0);
    return b.sel(b.bin(Op::Eq, b.un(Op::Abs, m), b.cnst(INFINITY, t)), b.cnst(0, t), m);
  };
  Builder b0 = begin(dom, false);
  b0.st.reductions.push_back({ReduceOp::MaxLoose, b0.cast(b0.load(dom.full_access(x, in.sizes), compute_type(in.dtype)), t), t});
  finish(dom, b0);
  Builder b1 = begin(dom, false);
  int32_t d = b1.sub(b1.cast(b1.load(dom.full_access(x, in.sizes), compute_type(in.dtype)), t), shifted_max(b1));
  b1.st.reductions.push_back({ReduceOp::Sum, b1.un(Op::Exp, d), t});
  finish(dom, b1);
  Builder b2 = begin(dom, true);
  int32_t r = b2.add(b2.un(Op::Log, b2.emit(Op::Reduced, t, 1)), shifted_max(b2));
  b2.st.stores.push_back({rounded(b2, r, c.out().dtype), dom.reduced_access(c.n.outputs[0], c.out())});
  finish(dom, b2);
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// layer_norm / rms_norm over the trailing normalized_shape dims.
bool lower_norm(const Ctx& c, NodeLowering& out, bool rms) {
  const TensorMeta& in = c.meta(0);
  const TensorMeta& res = c.out();
  ST t = compute_type(res.dtype);
  if (!is_float(in.dtype)) return false;
  const size_t k = c.n.args.at(1).ints.size();
  std::vector<bool> mask(in.sizes.size(), false);
  for (size_t d = in.sizes.size() - k; d < in.sizes.size(); ++d) mask[d] = true;
  Domain dom(in.sizes, mask);
  const double n = static_cast<double>(dom.inner_numel);
  ValueId x = c.n.args[0].value;
  const size_t eps_arg = rms ? 3 : 4;
  double eps = c.is_none(eps_arg) ? (in.dtype == ST::Double ? std::numeric_limits<double>::epsilon()
                                     : in.dtype == ST::BFloat16 ? 0.0078125
                                     : in.dtype == ST::Half ? 0.0009765625 : std::numeric_limits<float>::epsilon())
                                  : c.scalar(eps_arg);
  auto ld = [&](Builder& b, ValueId v) { return b.cast(b.load(dom.full_access(v, c.g.meta(v).sizes), compute_type(c.g.meta(v).dtype)), t); };
  auto affine = [&](Builder& b, int32_t y) {
    if (c.is_value(2)) y = b.mul(y, ld(b, c.n.args[2].value));
    if (!rms && c.is_value(3)) y = b.add(y, ld(b, c.n.args[3].value));
    return y;
  };
  if (rms) {
    Builder b0 = begin(dom, false);
    int32_t x0 = ld(b0, x);
    b0.st.reductions.push_back({ReduceOp::Sum, b0.mul(x0, x0), t});
    finish(dom, b0);
    Builder b1 = begin(dom, false);
    int32_t scale = b1.un(Op::Rsqrt, b1.add(b1.div(b1.emit(Op::Reduced, t, 0), b1.cnst(n, t)), b1.cnst(eps, t)));
    b1.st.stores.push_back({rounded(b1, affine(b1, b1.mul(ld(b1, x), scale)), res.dtype), dom.full_access(c.n.outputs[0], res.sizes)});
    finish(dom, b1);
  } else {
    Builder b0 = begin(dom, false);
    b0.st.reductions.push_back({ReduceOp::Sum, ld(b0, x), t});
    finish(dom, b0);
    Builder b1 = begin(dom, false);
    int32_t d = b1.sub(ld(b1, x), b1.div(b1.emit(Op::Reduced, t, 0), b1.cnst(n, t)));
    b1.st.reductions.push_back({ReduceOp::Sum, b1.mul(d, d), t});
    finish(dom, b1);
    Builder b2 = begin(dom, false);
    int32_t d2 = b2.sub(ld(b2, x), b2.div(b2.emit(Op::Reduced, t, 0), b2.cnst(n, t)));
    int32_t rstd = b2.un(Op::Rsqrt, b2.add(b2.div(b2.emit(Op::Reduced, t, 1), b2.cnst(n, t)), b2.cnst(eps, t)));
    b2.st.stores.push_back({rounded(b2, affine(b2, b2.mul(d2, rstd)), res.dtype), dom.full_access(c.n.outputs[0], res.sizes)});
    finish(dom, b2);
  }
  out.kind = NodeLowering::Kind::Kernels;
  out.kernels.push_back(std::move(dom.def));
  return true;
}

// cat: one copy kernel per input, storing into its slice of the output.
bool lower_cat(const Ctx& c, NodeLowering& out) {
  const TensorMeta& res = c.out();
  if (compute_type(res.dtype) == ST::Undefined) return false;
  const int64_t rank = res.dim();
  int64_t dim = *wrap_dim(c.n.args.size() > 1 ? c.n.args[1].i : 0, rank);
  int64_t offset = 0;
  for (ValueId v : c.n.args.at(0).values) {
    const TensorMeta& m = c.g.meta(v);
    if (compute_type(m.dtype) == ST::Undefined) return false;
    if (m.dim() != rank) {  // legacy empty 1-d inputs are skipped by ATen
      if (m.numel() == 0) continue;
      return false;
    }
    Domain dom(m.sizes, std::vector<bool>(m.sizes.size(), false));
    // pointwise shape: the last dim inner
    if (rank > 0) {
      dom.def.kernel.outer.pop_back();
      dom.def.kernel.inner.push_back(m.sizes.back());
    }
    Builder b = begin(dom, false);
    int32_t x = b.cast(b.load(dom.full_access(v, m.sizes), compute_type(m.dtype)), compute_type(res.dtype));
    Access dst = dom.full_access(c.n.outputs[0], m.sizes);
    dst.index[static_cast<size_t>(dim)].constant += offset;
    b.st.stores.push_back({x, dst});
    finish(dom, b);
    out.kernels.push_back(std::move(dom.def));
    offset += m.sizes[static_cast<size_t>(dim)];
  }
  out.kind = NodeLowering::Kind::Kernels;
  return true;
}

// glu(x, dim): first half * sigmoid(second half).
int32_t lower_glu(Builder& b, const Ctx& c, ST t) {
  if (!is_float(c.out().dtype)) return -1;
  const TensorMeta& in = c.meta(0);
  int64_t dim = *wrap_dim(c.n.args.size() > 1 ? c.n.args[1].i : -1, in.dim());
  Access a = broadcast_access(c.n.args[0].value, c.out().sizes, b.dims());
  for (size_t k = 0; k < a.index.size(); ++k)  // every dim is read in full (no broadcast)
    a.index[k] = dim_index(b.dims(), static_cast<int64_t>(k));
  Access second = a;
  second.index[static_cast<size_t>(dim)].constant = c.out().sizes[static_cast<size_t>(dim)];
  int32_t x = b.cast(b.load(a, compute_type(in.dtype)), t);
  int32_t y = b.cast(b.load(second, compute_type(in.dtype)), t);
  return b.mul(x, sigmoid_of(b, y));
}

// embedding / index_select: a gather through a dynamic index.
int32_t lower_gather(Builder& b, const Ctx& c, ST t) {
  const bool emb = c.n.op == OpId::embedding;
  const size_t src_arg = 0, idx_arg = emb ? 1 : 2;
  const TensorMeta& src = c.meta(src_arg);
  const TensorMeta& idx = c.meta(idx_arg);
  if (idx.dtype != ST::Long && idx.dtype != ST::Int) return -1;
  const int64_t rank = b.dims();
  Access ia;
  ia.value = c.n.args[idx_arg].value;
  Access sa;
  sa.value = c.n.args[src_arg].value;
  if (emb) {
    if (src.dim() != 2) return -1;
    for (int64_t k = 0; k < idx.dim(); ++k) ia.index.push_back(dim_index(rank, k));
  } else {
    if (idx.dim() > 1) return -1;
    int64_t dim = *wrap_dim(c.n.args[1].i, src.dim());
    if (idx.dim() == 1) ia.index.push_back(dim_index(rank, src.dim() == 0 ? -1 : dim));
  }
  int32_t i = b.cast(b.load(ia, compute_type(idx.dtype)), ST::Long);
  if (emb) {
    AffineIndex row = dim_index(rank, -1);
    row.dynamic = i;
    sa.index.push_back(row);
    sa.index.push_back(dim_index(rank, rank - 1));
  } else {
    int64_t dim = src.dim() == 0 ? -1 : *wrap_dim(c.n.args[1].i, src.dim());
    for (int64_t k = 0; k < src.dim(); ++k) {
      if (k == dim) {
        AffineIndex r = dim_index(rank, -1);
        r.dynamic = i;
        sa.index.push_back(r);
      } else {
        sa.index.push_back(dim_index(rank, k));
      }
    }
  }
  return b.cast(b.load(sa, compute_type(src.dtype)), t);
}

// ---- the node dispatcher ---------------------------------------------------------------------

bool all_types_ok(const Graph& g, const Node& n) {
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::Value && compute_type(g.meta(a.value).dtype) == ST::Undefined) return false;
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId v : a.values)
        if (v < 0 || compute_type(g.meta(v).dtype) == ST::Undefined) return false;
  }
  for (ValueId v : n.outputs)
    if (compute_type(g.meta(v).dtype) == ST::Undefined) return false;
  return true;
}

NodeLowering lower_node(const Graph& g, const Node& n) {
  NodeLowering out;
  const OpInfo& info = op_info(n.op);
  Ctx c{g, n};
  if (info.category == OpCategory::View) {
    out.kind = NodeLowering::Kind::View;
    if (n.op == OpId::view_dtype) throw Unsupported("aten::view.dtype reinterprets memory");
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      NodeLowering::View v;
      v.base = n.args.at(0).value;
      if (auto m = view_map(g, n, o)) {
        v.affine = true;
        v.map = std::move(*m);
      }
      out.views.push_back(std::move(v));
    }
    return out;
  }
  if (!all_types_ok(g, n)) {
    out.why = "dtype";
    return out;
  }
  bool done = false;
  switch (n.op) {
    case OpId::sum_dim_IntList: done = lower_simple_reduction(c, out, ReduceOp::Sum, false, 1, c.is_none(1)); break;
    case OpId::mean_dim: done = lower_simple_reduction(c, out, ReduceOp::Sum, true, 1, c.is_none(1)); break;
    case OpId::prod: done = lower_simple_reduction(c, out, ReduceOp::Prod, false, 9, true); break;
    case OpId::prod_dim_int: done = lower_simple_reduction(c, out, ReduceOp::Prod, false, 1, false); break;
    case OpId::amax: done = lower_simple_reduction(c, out, ReduceOp::Max, false, 1, false); break;
    case OpId::amin: done = lower_simple_reduction(c, out, ReduceOp::Min, false, 1, false); break;
    case OpId::max: done = lower_simple_reduction(c, out, ReduceOp::Max, false, 9, true); break;
    case OpId::min: done = lower_simple_reduction(c, out, ReduceOp::Min, false, 9, true); break;
    case OpId::any_dims: done = lower_any_all(c, out, false); break;
    case OpId::cumsum: done = lower_cumsum(c, out); break;
    case OpId::all_dims: done = lower_any_all(c, out, true); break;
    case OpId::max_dim: done = lower_arg_reduction(c, out, true, true); break;
    case OpId::min_dim: done = lower_arg_reduction(c, out, false, true); break;
    case OpId::argmax: done = lower_arg_reduction(c, out, true, false); break;
    case OpId::argmin: done = lower_arg_reduction(c, out, false, false); break;
    case OpId::var_correction: done = lower_variance(c, out, false, false); break;
    case OpId::std_correction: done = lower_variance(c, out, true, false); break;
    case OpId::var_mean_correction: done = lower_variance(c, out, false, true); break;
    case OpId::std_mean_correction: done = lower_variance(c, out, true, true); break;
    case OpId::logsumexp: done = lower_logsumexp(c, out); break;
    case OpId::softmax_int: done = lower_softmax(c, out, false); break;
    case OpId::log_softmax_int: done = lower_softmax(c, out, true); break;
    case OpId::layer_norm: done = lower_norm(c, out, false); break;
    case OpId::rms_norm: done = lower_norm(c, out, true); break;
    case OpId::cat: done = lower_cat(c, out); break;
    default: break;
  }
  if (done) return out;
  out.kernels.clear();
  out.kind = NodeLowering::Kind::Extern;
  // Pointwise-shaped nodes: one output, a body over the output's dims.
  using Rule = int32_t (*)(Builder&, const Ctx&, ST);
  Rule special = n.op == OpId::glu ? lower_glu
               : (n.op == OpId::embedding || n.op == OpId::index_select) ? lower_gather : nullptr;
  const PointwiseRule* rule = special ? nullptr : find_pointwise(n.op);
  if (!rule && !special) {
    out.why = "no lowering";
    return out;
  }
  if (n.outputs.size() != 1) return out;
  const TensorMeta& res = c.out();
  ST t = compute_type(res.dtype);
  Builder b(res.dim());
  int32_t r = special ? special(b, c, t) : (*rule)(b, c, t);
  if (r < 0) {
    out.why = "no lowering for these dtypes";
    return out;
  }
  out.kind = NodeLowering::Kind::Pointwise;
  out.result = rounded(b, b.cast(r, t), res.dtype);
  out.body = std::move(b.st);
  return out;
}

}  // namespace

LoweredGraph lower(const Graph& original) {
  for (const TensorMeta& m : original.values) {
    if (!m.device.is_cpu()) throw Unsupported("a tensor is on " + m.device.str() + ", not the CPU");
  }
  LoweredGraph lg;
  Functional f = functionalize(original);
  lg.graph = std::move(f.graph);
  lg.writebacks = std::move(f.writebacks);
  const Graph& g = lg.graph;
  for (const Node& n : g.nodes) {
    const OpInfo& info = op_info(n.op);
    if (info.category == OpCategory::InPlace) throw Unsupported(std::string("in-place op aten::") + info.aten + " mutates a tensor");
    for (ValueId v : n.outputs)
      if (g.meta(v).requires_grad) throw Unsupported("autograd: " + print_node(g, n) + " requires grad");
    lg.nodes.push_back(lower_node(g, n));
  }
  return lg;
}

}  // namespace fastdyn::codegen::loop
