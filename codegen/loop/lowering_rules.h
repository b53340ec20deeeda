// codegen/loop/lowering_rules.h — what the lowering rules share (internal to codegen/loop).
//
// lowering.cpp dispatches each graph node by ops.def's Lower column: views become index maps
// there; pointwise-shaped ops (one output, a body over its dims) take a row of the table in
// lower_pointwise.cpp; reductions, normalisations, softmax and cat a row of the kernel table in
// lower_reductions.cpp (LoweringCoverage checks the column and the tables agree). All of them
// build loop IR through the Builder below and read the node through Ctx.
#pragma once
#include "codegen/loop/passes.h"
#include "codegen/capture/meta_rules.h"
#include "runtime/errors.h"

#include <functional>
#include <string>
#include <vector>

namespace fastdyn::codegen::loop::lowering {

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
  int32_t count(int64_t n, ST t) { return emit(Op::Count, t, -1, -1, -1, static_cast<double>(n)); }  // see Op::Count
  int32_t cast(int32_t x, ST t) { return type(x) == t ? x : emit(Op::Cast, t, x); }
  int32_t un(Op op, int32_t x) { return emit(op, op == Op::IsNan ? ST::Bool : type(x), x); }  // IsNan: a predicate
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

// coef * (domain dim d) + constant over a `dims`-dim domain; d = -1 gives the constant alone.
inline AffineIndex dim_index(int64_t dims, int64_t d, int64_t coef = 1, int64_t constant = 0) {
  AffineIndex ix;
  ix.coef.assign(static_cast<size_t>(dims), 0);
  if (d >= 0) ix.coef[static_cast<size_t>(d)] = coef;
  ix.constant = constant;
  return ix;
}

// ix's constant as `e` too, when e is symbolic (AffineIndex::sym_constant).
inline void set_sym_constant(AffineIndex& ix, const shapes::SizeExpr& e) {
  if (!e.is_constant()) ix.sym_constant = {e};
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
      case Arg::Kind::Int:
        // Loop IR constants are doubles: past 2^53 an int would be rounded. ATen's call keeps it.
        if (a.i > (int64_t{1} << 53) || a.i < -(int64_t{1} << 53))
          throw Unsupported("integer argument " + std::to_string(a.i) + " is beyond 2^53");
        return static_cast<double>(a.i);
      case Arg::Kind::Double: return a.d;
      case Arg::Kind::Bool: return a.b ? 1 : 0;
      case Arg::Kind::None: return dflt;
      default: throw Unsupported("argument " + std::to_string(arg) + " is not a number");
    }
  }
  bool scalar_is_float(size_t arg) const { return arg < n.args.size() && n.args[arg].kind == Arg::Kind::Double; }
};

inline bool is_float(ST t) { return t == ST::Float || t == ST::Double || t == ST::BFloat16 || t == ST::Half; }

// x (of the compute type of `storage`) rounded as eager rounds a value stored as `storage`.
inline int32_t rounded(Builder& b, int32_t x, ST storage) {
  if (storage == ST::BFloat16) return b.un(Op::RoundBF16, x);
  if (storage == ST::Half) return b.un(Op::RoundF16, x);
  return x;
}

// ---- the rules -------------------------------------------------------------------------------

// A pointwise rule builds the body over the output's dims and returns the result instr (of the
// output's compute type, or any type: the caller casts). -1 means "no lowering for these dtypes"
// (the node stays Extern).
using PointwiseRule = std::function<int32_t(Builder&, const Ctx&, ST /*compute type of output*/)>;

// The table row of `op`, or nullptr (lower_pointwise.cpp).
const PointwiseRule* find_pointwise(OpId op);

// Reductions, normalisations, softmax, cat (lower_reductions.cpp): a rule returns true when `out`
// now holds the node's kernels, false when these arguments cannot be lowered (the node stays
// Extern).
using KernelRule = std::function<bool(const Ctx&, NodeLowering&)>;

// The table row of `op`, or nullptr (lower_reductions.cpp).
const KernelRule* find_kernel(OpId op);

}  // namespace fastdyn::codegen::loop::lowering
