// codegen/loop/lower_reductions.cpp — ops that build their own kernels: reductions (sum, mean,
// prod, amax/amin, max/min, any/all, argmax/argmin, var/std, logsumexp), cumsum, softmax and
// log_softmax, layer_norm and rms_norm (reduction -> broadcast -> reduction stages in one kernel),
// and cat (one copy kernel per input).
#include "codegen/loop/lowering_rules.h"

#include <cmath>
#include <limits>

namespace fastdyn::codegen::loop::lowering {
namespace {

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
  if (mean) r = b1.div(r, b1.count(dom.inner_numel, acc));
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
  const double correction = c.is_none(2) ? 1.0 : c.scalar(2);
  Builder b0 = begin(dom, false);
  int32_t x0 = b0.load(dom.full_access(c.n.args[0].value, in.sizes), t);
  b0.st.reductions.push_back({ReduceOp::Sum, x0, t});
  finish(dom, b0);
  Builder b1 = begin(dom, false);
  int32_t x1 = b1.load(dom.full_access(c.n.args[0].value, in.sizes), t);
  int32_t mean1 = b1.div(b1.emit(Op::Reduced, t, 0), b1.count(dom.inner_numel, t));
  int32_t d = b1.sub(x1, mean1);
  b1.st.reductions.push_back({ReduceOp::Sum, b1.mul(d, d), t});
  finish(dom, b1);
  Builder b2 = begin(dom, true);
  // max(n - correction, 0) with n the row's point count (Op::Count: computed at run time where the
  // row length is a size symbol, so one kernel serves every length).
  const int32_t dof = b2.bin(Op::Max, b2.sub(b2.count(dom.inner_numel, t), b2.cnst(correction, t)), b2.cnst(0.0, t));
  int32_t var = b2.div(b2.emit(Op::Reduced, t, 1), dof);
  if (is_std) var = b2.un(Op::Sqrt, var);
  b2.st.stores.push_back({rounded(b2, var, c.out().dtype), dom.reduced_access(c.n.outputs[0], c.g.meta(c.n.outputs[0]))});
  if (with_mean) {
    int32_t mean = b2.div(b2.emit(Op::Reduced, t, 0), b2.count(dom.inner_numel, t));
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
    int32_t scale = b1.un(Op::Rsqrt, b1.add(b1.div(b1.emit(Op::Reduced, t, 0), b1.count(dom.inner_numel, t)), b1.cnst(eps, t)));
    b1.st.stores.push_back({rounded(b1, affine(b1, b1.mul(ld(b1, x), scale)), res.dtype), dom.full_access(c.n.outputs[0], res.sizes)});
    finish(dom, b1);
  } else {
    Builder b0 = begin(dom, false);
    b0.st.reductions.push_back({ReduceOp::Sum, ld(b0, x), t});
    finish(dom, b0);
    Builder b1 = begin(dom, false);
    int32_t d = b1.sub(ld(b1, x), b1.div(b1.emit(Op::Reduced, t, 0), b1.count(dom.inner_numel, t)));
    b1.st.reductions.push_back({ReduceOp::Sum, b1.mul(d, d), t});
    finish(dom, b1);
    Builder b2 = begin(dom, false);
    int32_t d2 = b2.sub(ld(b2, x), b2.div(b2.emit(Op::Reduced, t, 0), b2.count(dom.inner_numel, t)));
    int32_t rstd = b2.un(Op::Rsqrt, b2.add(b2.div(b2.emit(Op::Reduced, t, 1), b2.count(dom.inner_numel, t)), b2.cnst(eps, t)));
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
  shapes::SizeExpr sym_offset = 0;  // the offset over size symbols (AffineIndex::sym_constant)
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
    AffineIndex& at = dst.index[static_cast<size_t>(dim)];
    set_sym_constant(at, at.constant_expr() + sym_offset);
    at.constant += offset;
    b.st.stores.push_back({x, dst});
    finish(dom, b);
    out.kernels.push_back(std::move(dom.def));
    offset += m.sizes[static_cast<size_t>(dim)];
    sym_offset = sym_offset + m.size_expr(static_cast<size_t>(dim));
  }
  out.kind = NodeLowering::Kind::Kernels;
  return true;
}

}  // namespace

namespace {

struct KernelRow {
  OpId op;
  KernelRule rule;
};

// The ops with a kernel of their own: ops.def's rows whose Lower column says Kernel, one for one
// (LoweringCoverage checks it).
const std::vector<KernelRow>& kernel_rows() {
  using R = ReduceOp;
  static const std::vector<KernelRow> rows = {
      {OpId::sum_dim_IntList, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Sum, false, 1, c.is_none(1)); }},
      {OpId::mean_dim, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Sum, true, 1, c.is_none(1)); }},
      {OpId::prod, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Prod, false, 9, true); }},
      {OpId::prod_dim_int, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Prod, false, 1, false); }},
      {OpId::amax, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Max, false, 1, false); }},
      {OpId::amin, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Min, false, 1, false); }},
      {OpId::max, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Max, false, 9, true); }},
      {OpId::min, [](const Ctx& c, NodeLowering& o) { return lower_simple_reduction(c, o, R::Min, false, 9, true); }},
      {OpId::any_dims, [](const Ctx& c, NodeLowering& o) { return lower_any_all(c, o, false); }},
      {OpId::all_dims, [](const Ctx& c, NodeLowering& o) { return lower_any_all(c, o, true); }},
      {OpId::cumsum, [](const Ctx& c, NodeLowering& o) { return lower_cumsum(c, o); }},
      {OpId::max_dim, [](const Ctx& c, NodeLowering& o) { return lower_arg_reduction(c, o, true, true); }},
      {OpId::min_dim, [](const Ctx& c, NodeLowering& o) { return lower_arg_reduction(c, o, false, true); }},
      {OpId::argmax, [](const Ctx& c, NodeLowering& o) { return lower_arg_reduction(c, o, true, false); }},
      {OpId::argmin, [](const Ctx& c, NodeLowering& o) { return lower_arg_reduction(c, o, false, false); }},
      {OpId::var_correction, [](const Ctx& c, NodeLowering& o) { return lower_variance(c, o, false, false); }},
      {OpId::std_correction, [](const Ctx& c, NodeLowering& o) { return lower_variance(c, o, true, false); }},
      {OpId::var_mean_correction, [](const Ctx& c, NodeLowering& o) { return lower_variance(c, o, false, true); }},
      {OpId::std_mean_correction, [](const Ctx& c, NodeLowering& o) { return lower_variance(c, o, true, true); }},
      {OpId::logsumexp, [](const Ctx& c, NodeLowering& o) { return lower_logsumexp(c, o); }},
      {OpId::softmax_int, [](const Ctx& c, NodeLowering& o) { return lower_softmax(c, o, false); }},
      {OpId::log_softmax_int, [](const Ctx& c, NodeLowering& o) { return lower_softmax(c, o, true); }},
      {OpId::layer_norm, [](const Ctx& c, NodeLowering& o) { return lower_norm(c, o, false); }},
      {OpId::rms_norm, [](const Ctx& c, NodeLowering& o) { return lower_norm(c, o, true); }},
      {OpId::cat, [](const Ctx& c, NodeLowering& o) { return lower_cat(c, o); }},
  };
  return rows;
}

}  // namespace

const KernelRule* find_kernel(OpId op) {
  for (const KernelRow& r : kernel_rows())
    if (r.op == op) return &r.rule;
  return nullptr;
}

}  // namespace fastdyn::codegen::loop::lowering
