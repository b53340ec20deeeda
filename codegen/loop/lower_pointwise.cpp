// codegen/loop/lower_pointwise.cpp — the pointwise table: one row per op whose output is one
// body over the output's dims (arithmetic, comparisons, casts, unary math, activations, gathers).
//
// Composites are decomposed into loop_ir.h's small scalar op set here (gelu into erf or tanh, silu
// into exp, ...). A row returning -1 for a node's dtypes leaves that node Extern (ATen runs it).
#include "codegen/loop/lowering_rules.h"

#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

namespace fastdyn::codegen::loop::lowering {
namespace {

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

int32_t unary_math(Builder& b, const Ctx& c, ST t, Op op) {
  if (!is_float(c.out().dtype)) return -1;
  return b.un(op, operand(b, c, 0, t));
}

int32_t softplus_of(Builder& b, int32_t x, double beta, double threshold) {
  int32_t xb = b.mul(x, b.k(beta, x));
  int32_t soft = b.div(b.un(Op::Log1p, b.un(Op::Exp, xb)), b.k(beta, x));
  return b.sel(b.bin(Op::Gt, xb, b.k(threshold, x)), x, soft);
}

// erf is one op of the loop IR; each backend picks its implementation (llvm_cpu: an inline
// rational fit for float32, codegen/llvm/inline_math.h; cuda: CUDA's erff).
int32_t erf_of(Builder& b, int32_t x) { return b.un(Op::Erf, x); }
// hardsigmoid's and hardswish's last step as eager's kernel for the output's device takes it:
// ATen's CUDA kernels multiply by 1/6 rounded to float (in double too: 3e-8 from dividing), its
// CPU kernels divide by 6.
int32_t over_six(Builder& b, const Ctx& c, int32_t v) {
  if (c.out().device.is_cuda()) return b.mul(v, b.k(static_cast<double>(1.0f / 6.0f), v));
  return b.div(v, b.k(6, v));
}


int32_t sigmoid_of(Builder& b, int32_t x) {
  return b.div(b.k(1, x), b.add(b.k(1, x), b.un(Op::Exp, b.un(Op::Neg, x))));
}

// An operand of add/sub as ATen's kernel sees it: for a bfloat16 or half result, a scalar or a
// tensor of another dtype (a 0-d float32) is first cast to the result's dtype (x + 1.1 adds
// bfloat16(1.1)), where mul and div keep the scalar's full value.
int32_t additive_operand(Builder& b, const Ctx& c, size_t arg, ST t) {
  const ST res = c.out().dtype;
  int32_t x = operand(b, c, arg, t);
  if ((res == ST::BFloat16 || res == ST::Half) && (!c.is_value(arg) || c.meta(arg).dtype != res)) x = rounded(b, x, res);
  return x;
}

int32_t arith(Builder& b, const Ctx& c, ST t, Op op, bool alpha) {
  const bool additive = op == Op::Add || op == Op::Sub;
  int32_t x = additive ? additive_operand(b, c, 0, t) : operand(b, c, 0, t);
  int32_t y = additive ? additive_operand(b, c, 1, t) : operand(b, c, 1, t);
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
         int32_t x = additive_operand(b, c, 0, t), y = additive_operand(b, c, 1, t);
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
         return over_six(b, c, r);
       }},
      {OpId::hardswish, [](Builder& b, const Ctx& c, ST t) {
         if (!is_float(c.out().dtype)) return -1;
         int32_t x = operand(b, c, 0, t);
         int32_t r = b.bin(Op::Min, b.bin(Op::Max, b.add(x, b.k(3, x)), b.k(0, x)), b.k(6, x));
         return over_six(b, c, b.mul(x, r));
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
         // Only a dtype change on the tensor's own device: layout / device moves / pinning stay ATen's business.
         if (!c.is_none(2)) return -1;
         if (!c.is_none(3) && !(c.n.args[3].kind == Arg::Kind::Device && c.n.args[3].device.type() == c.meta(0).device.type() &&
                                 (!c.n.args[3].device.has_index() || c.n.args[3].device.index() == c.meta(0).device.index())))
           return -1;
         if (!c.is_none(4) && !(c.n.args[4].kind == Arg::Kind::Bool && !c.n.args[4].b)) return -1;
         return b.cast(operand(b, c, 0, compute_type(c.meta(0).dtype)), t);
       }},
      {OpId::glu, lower_glu},
      {OpId::embedding, lower_gather},
      {OpId::index_select, lower_gather},
  };
  return rows;
}
#undef FD_U
#undef FD_CMP
#undef FD_FLOAT_ONLY

}  // namespace

const PointwiseRule* find_pointwise(OpId op) {
  static const std::unordered_map<int, const PointwiseRule*> index = [] {
    std::unordered_map<int, const PointwiseRule*> m;
    for (const PointwiseRow& r : pointwise_rows()) m[static_cast<int>(r.op)] = &r.rule;
    return m;
  }();
  auto it = index.find(static_cast<int>(op));
  return it == index.end() ? nullptr : it->second;
}

}  // namespace fastdyn::codegen::loop::lowering
