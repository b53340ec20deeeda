// codegen/capture/capture_reductions.cpp — binders of the reduction families: sum, mean, prod, amax/amin,
// max/min (full, over a dim -> (values, indices), or against a tensor -> maximum/minimum),
// argmax/argmin, all/any, var/std (+ _mean), norm / linalg.vector_norm, logsumexp, cumsum/cumprod,
// count_nonzero, softmax / log_softmax.
//
// Layout: ATen's reduction kernels allocate their outputs contiguous (also for transposed or
// channels-last inputs), so only shapes and dtypes differ between families. Dims follow Python:
// None (or an empty list, for the int[] dims) reduces everything, a single int is [int], negative
// dims wrap, and a zero-dim tensor accepts dims 0 and -1.
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"

#include "runtime/errors.h"

namespace fastdyn::codegen {

namespace {

using ST = c10::ScalarType;
using K = CallArg::Kind;

std::optional<ST> requested_dtype(const BoundArgs& a) {
  if (!a.values.count("dtype") || a.is_none("dtype")) return std::nullopt;
  return a.dtype("dtype");
}

// A reduction over `dims` (empty = all) of `x`; returns the output meta or an error.
std::optional<std::string> reduce_meta(const BindCall& c, const std::string& op, ValueId x,
                                       const std::vector<int64_t>& dims, bool keepdim, ST dtype, TensorMeta& out) {
  const TensorMeta& m = c.graph.meta(x);
  std::vector<bool> mask;
  if (auto err = reduction_mask(op.c_str(), dims, m.dim(), mask)) return err;
  out = contiguous_meta(dtype, m.device, reduced_shape(m.sizes, mask, keepdim),
                        any_requires_grad(c.graph, c.ctx, {x}));
  return std::nullopt;
}

// Reads an `int[]? dim` parameter: None -> nullopt.
std::optional<std::vector<int64_t>> opt_dims(const BoundArgs& a, const char* name) {
  if (a.is_none(name)) return std::nullopt;
  return a.ints(name);
}

Arg dims_arg(const std::optional<std::vector<int64_t>>& d) { return d ? Arg::of_ints(*d) : Arg::none(); }

// sum / mean: (self, int[1]? dim, keepdim, *, dtype).
CaptureResult record_sum_like(BindCall& c, const Signature& sig, OpId op) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  auto req = requested_dtype(a);
  ST dt;
  if (auto err = result_dtype(op, sig.name(), c.graph.meta(x).dtype, req, c.ctx.default_dtype, dt))
    return CaptureResult::fail(*err);
  auto dims = opt_dims(a, "dim");
  bool keepdim = a.boolean("keepdim");
  TensorMeta out;
  if (auto err = reduce_meta(c, sig.name(), x, dims.value_or(std::vector<int64_t>{}), keepdim, dt, out))
    return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, op,
                             {Arg::of_value(x), dims_arg(dims), Arg::of_bool(keepdim),
                              req ? Arg::of_dtype(*req) : Arg::none()},
                             out));
}

}  // namespace

CaptureResult bind_sum(BindCall& c) {
  static const Signature sig("sum(Tensor input, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)");
  return record_sum_like(c, sig, OpId::sum_dim_IntList);
}

CaptureResult bind_mean(BindCall& c) {
  static const Signature sig("mean(Tensor input, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)");
  return record_sum_like(c, sig, OpId::mean_dim);
}

CaptureResult bind_prod(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "prod(Tensor input, int? dim=None, bool keepdim=False, *, ScalarType? dtype=None)");
  ValueId x = a.tensor("input");
  auto req = requested_dtype(a);
  ST dt;
  if (auto err = result_dtype(OpId::prod, "prod", c.graph.meta(x).dtype, req, c.ctx.default_dtype, dt))
    return CaptureResult::fail(*err);
  Arg dtype_arg = req ? Arg::of_dtype(*req) : Arg::none();
  TensorMeta out;
  if (a.is_none("dim")) {
    if (auto err = reduce_meta(c, "prod", x, {}, false, dt, out)) return CaptureResult::fail(*err);
    return tensor_result(emit1(c.graph, OpId::prod, {Arg::of_value(x), dtype_arg}, out));
  }
  int64_t d = a.integer("dim");
  bool keepdim = a.boolean("keepdim");
  if (auto err = reduce_meta(c, "prod", x, {d}, keepdim, dt, out)) return CaptureResult::fail(*err);
  return tensor_result(
      emit1(c.graph, OpId::prod_dim_int, {Arg::of_value(x), Arg::of_int(d), Arg::of_bool(keepdim), dtype_arg}, out));
}

namespace {
// amax / amin: (self, int[1] dim=[], keepdim); an empty list reduces everything.
CaptureResult record_amax_like(BindCall& c, const Signature& sig, OpId op) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  std::vector<int64_t> dims = a.ints("dim");
  bool keepdim = a.boolean("keepdim");
  TensorMeta out;
  if (auto err = reduce_meta(c, sig.name(), x, dims, keepdim, c.graph.meta(x).dtype, out))
    return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, op, {Arg::of_value(x), Arg::of_ints(dims), Arg::of_bool(keepdim)}, out));
}

// max / min: no dim -> full reduction; an int dim -> (values, indices); a tensor -> elementwise.
CaptureResult record_max_like(BindCall& c, const Signature& sig, OpId full, OpId by_dim, Family elementwise) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  const std::string& name = sig.name();
  ValueId x = a.tensor("input");
  const CallArg& d = a.get("dim");
  if (d.kind == K::Tensor) {
    if (a.boolean("keepdim")) return CaptureResult::fail(name + ": 'keepdim' is not valid with a tensor 'other'");
    return record_call(c.graph, c.ctx, elementwise, {a.get("input"), d}, {});
  }
  const TensorMeta& m = c.graph.meta(x);
  TensorMeta out;
  if (d.kind == K::None) {
    if (a.boolean("keepdim")) return CaptureResult::fail(name + ": 'keepdim' needs 'dim'");
    if (m.numel() == 0)
      return CaptureResult::fail(name + "(): expected a non-empty tensor for a reduction over all dims");
    if (auto err = reduce_meta(c, name, x, {}, false, m.dtype, out)) return CaptureResult::fail(*err);
    return tensor_result(emit1(c.graph, full, {Arg::of_value(x)}, out));
  }
  bool keepdim = a.boolean("keepdim");
  if (auto err = reduce_meta(c, name, x, {d.i}, keepdim, m.dtype, out)) return CaptureResult::fail(*err);
  auto w = wrap_dim(d.i, m.dim());
  if (m.dim() > 0 && m.sizes[*w] == 0)
    return CaptureResult::fail(name + "(): cannot reduce over the empty dimension " + std::to_string(*w));
  TensorMeta idx = out;
  idx.dtype = ST::Long;
  idx.requires_grad = false;
  auto outs = emit(c.graph, by_dim, {Arg::of_value(x), Arg::of_int(d.i), Arg::of_bool(keepdim)}, {out, idx});
  return tuple_result(outs, {"values", "indices"});
}

CaptureResult record_argmax_like(BindCall& c, const Signature& sig, OpId op) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  bool keepdim = a.boolean("keepdim");
  TensorMeta out;
  std::vector<int64_t> dims;
  if (!a.is_none("dim")) dims = {a.integer("dim")};
  if (c.graph.meta(x).numel() == 0 && dims.empty())
    return CaptureResult::fail(sig.name() + "(): expected a non-empty tensor");
  ST dt;
  if (auto err = result_dtype(op, sig.name(), c.graph.meta(x).dtype, std::nullopt, c.ctx.default_dtype, dt))
    return CaptureResult::fail(*err);
  if (auto err = reduce_meta(c, sig.name(), x, dims, keepdim, dt, out)) return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, op, {Arg::of_value(x), const_arg(a.get("dim")), Arg::of_bool(keepdim)}, out));
}

CaptureResult record_all_like(BindCall& c, const Signature& sig, OpId op) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  auto dims = opt_dims(a, "dim");
  bool keepdim = a.boolean("keepdim");
  ST dt;
  result_dtype(op, sig.name(), c.graph.meta(x).dtype, std::nullopt, c.ctx.default_dtype, dt);
  TensorMeta out;
  if (auto err = reduce_meta(c, sig.name(), x, dims.value_or(std::vector<int64_t>{}), keepdim, dt, out))
    return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, op, {Arg::of_value(x), dims_arg(dims), Arg::of_bool(keepdim)}, out));
}
}  // namespace

CaptureResult bind_amax(BindCall& c) {
  static const Signature sig("amax(Tensor input, int[] dim=[], bool keepdim=False)");
  return record_amax_like(c, sig, OpId::amax);
}
CaptureResult bind_amin(BindCall& c) {
  static const Signature sig("amin(Tensor input, int[] dim=[], bool keepdim=False)");
  return record_amax_like(c, sig, OpId::amin);
}
CaptureResult bind_max(BindCall& c) {
  static const Signature sig("max(Tensor input, Tensor|int? dim=None, bool keepdim=False)");
  return record_max_like(c, sig, OpId::max, OpId::max_dim, Family::maximum);
}
CaptureResult bind_min(BindCall& c) {
  static const Signature sig("min(Tensor input, Tensor|int? dim=None, bool keepdim=False)");
  return record_max_like(c, sig, OpId::min, OpId::min_dim, Family::minimum);
}
CaptureResult bind_argmax(BindCall& c) {
  static const Signature sig("argmax(Tensor input, int? dim=None, bool keepdim=False)");
  return record_argmax_like(c, sig, OpId::argmax);
}
// topk: the k largest (or smallest) along dim, as (values, indices), both dense in dim order.
CaptureResult bind_topk(BindCall& c) {
  static const Signature sig("topk(Tensor input, int k, int dim=-1, bool largest=True, bool sorted=True)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  const int64_t k = a.integer("k");
  auto d = wrap_dim(a.integer("dim"), m.dim());
  if (!d) return CaptureResult::fail("topk(): dimension out of range");
  const int64_t extent = m.dim() == 0 ? 1 : m.sizes[static_cast<size_t>(*d)];
  if (k < 0 || k > extent) return CaptureResult::fail("topk(): selected index k out of range");
  std::vector<int64_t> sizes = m.sizes;
  if (m.dim() > 0) sizes[static_cast<size_t>(*d)] = k;
  TensorMeta values = contiguous_meta(m.dtype, m.device, sizes, any_requires_grad(c.graph, c.ctx, {x}));
  TensorMeta indices = contiguous_meta(ST::Long, m.device, sizes, false);
  auto outs = emit(c.graph, OpId::topk, {Arg::of_value(x), Arg::of_int(k), Arg::of_int(a.integer("dim")),
                                          Arg::of_bool(a.boolean("largest")), Arg::of_bool(a.boolean("sorted"))},
                   {values, indices});
  return tuple_result(outs, {"values", "indices"});
}
CaptureResult bind_argmin(BindCall& c) {
  static const Signature sig("argmin(Tensor input, int? dim=None, bool keepdim=False)");
  return record_argmax_like(c, sig, OpId::argmin);
}
CaptureResult bind_all(BindCall& c) {
  static const Signature sig("all(Tensor input, int[]? dim=None, bool keepdim=False)");
  return record_all_like(c, sig, OpId::all_dims);
}
CaptureResult bind_any(BindCall& c) {
  static const Signature sig("any(Tensor input, int[]? dim=None, bool keepdim=False)");
  return record_all_like(c, sig, OpId::any_dims);
}

namespace {
// var/std(input, dim=None, unbiased=None, keepdim=False, *, correction=None), plus the legacy
// var(input, unbiased) form where the second positional argument is a bool.
CaptureResult record_var_like(BindCall& c, const Signature& sig, OpId op, bool with_mean) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  const std::string& name = sig.name();
  ValueId x = a.tensor("input");
  CallArg dim = a.get("dim");
  CallArg unbiased = a.get("unbiased");
  if (dim.kind == K::Bool) {
    if (unbiased.kind != K::None) return CaptureResult::fail(name + "(): 'unbiased' given twice");
    unbiased = dim;
    dim = CallArg::none();
  }
  std::optional<std::vector<int64_t>> dims;
  if (dim.kind == K::Int) dims = std::vector<int64_t>{dim.i};
  else if (dim.kind == K::IntList) dims = dim.ints;
  else if (dim.kind != K::None) return CaptureResult::fail(name + "(): argument 'dim' must be int or tuple of ints");
  const CallArg& corr = a.get("correction");
  if (unbiased.kind != K::None && unbiased.kind != K::Bool)
    return CaptureResult::fail(name + "(): argument 'unbiased' must be bool");
  if (unbiased.kind == K::Bool && corr.kind != K::None)
    return CaptureResult::fail(name + "(): cannot specify both 'unbiased' and 'correction'");
  Arg corr_arg = corr.kind != K::None ? scalar_arg(corr)
                                      : unbiased.kind == K::Bool ? Arg::of_int(unbiased.b ? 1 : 0) : Arg::none();
  ST in = c.graph.meta(x).dtype;
  if (!is_floating(in)) return CaptureResult::fail(name + ": std and var only support floating point dtypes");
  bool keepdim = a.boolean("keepdim");
  TensorMeta out;
  if (auto err = reduce_meta(c, name, x, dims.value_or(std::vector<int64_t>{}), keepdim, in, out))
    return CaptureResult::fail(*err);
  std::vector<Arg> args{Arg::of_value(x), dims_arg(dims), corr_arg, Arg::of_bool(keepdim)};
  if (!with_mean) return tensor_result(emit1(c.graph, op, std::move(args), out));
  return tuple_result(emit(c.graph, op, std::move(args), {out, out}));
}
}  // namespace

#define FD_VAR_FAMILY(fam, op, with_mean)                                                                       \
  CaptureResult bind_##fam(BindCall& c) {                                                                       \
    static const Signature sig(#fam                                                                             \
                               "(Tensor input, Any dim=None, Any unbiased=None, bool keepdim=False, *, Number? " \
                               "correction=None)");                                                             \
    return record_var_like(c, sig, OpId::op, with_mean);                                                        \
  }
FD_VAR_FAMILY(var, var_correction, false)
FD_VAR_FAMILY(std, std_correction, false)
FD_VAR_FAMILY(var_mean, var_mean_correction, true)
FD_VAR_FAMILY(std_mean, std_mean_correction, true)
#undef FD_VAR_FAMILY

namespace {
CaptureResult record_vector_norm(BindCall& c, const std::string& name, ValueId x, const CallArg& ord,
                                 std::optional<std::vector<int64_t>> dims, bool keepdim, std::optional<ST> req) {
  ST dt;
  if (!is_floating(c.graph.meta(x).dtype))
    return CaptureResult::fail(name + ": expected a floating point tensor as input, got " +
                               dtype_name(c.graph.meta(x).dtype));
  if (auto err = result_dtype(OpId::linalg_vector_norm, name, c.graph.meta(x).dtype, req, c.ctx.default_dtype, dt))
    return CaptureResult::fail(*err);
  TensorMeta out;
  if (auto err = reduce_meta(c, name, x, dims.value_or(std::vector<int64_t>{}), keepdim, dt, out))
    return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, OpId::linalg_vector_norm,
                             {Arg::of_value(x), scalar_arg(ord), dims_arg(dims), Arg::of_bool(keepdim),
                              req ? Arg::of_dtype(*req) : Arg::none()},
                             out));
}
}  // namespace

CaptureResult bind_vector_norm(BindCall& c) {
  static const Signature sig(
      "vector_norm(Tensor x, Number ord=2, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  return record_vector_norm(c, "vector_norm", a.tensor("x"), a.get("ord"), opt_dims(a, "dim"), a.boolean("keepdim"),
                            requested_dtype(a));
}

// torch.norm: numeric p, or 'fro' over at most two dims, is linalg.vector_norm in eager.
CaptureResult bind_norm(BindCall& c) {
  static const Signature sig(
      "norm(Tensor input, Any p='fro', int[]? dim=None, bool keepdim=False, ScalarType? dtype=None)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  CallArg p = a.get("p");
  auto dims = opt_dims(a, "dim");
  if (p.kind == K::String) {
    if (p.str != "fro" || (dims && dims->size() > 2))
      return CaptureResult::fail("norm: p='" + p.str + "' (a matrix norm) is not supported");
    p = CallArg::of_int(2);
  } else if (p.kind == K::None) {
    p = CallArg::of_double(2.0);
  } else if (p.kind != K::Int && p.kind != K::Double) {
    return CaptureResult::fail("norm: argument 'p' must be a number or 'fro'");
  }
  return record_vector_norm(c, "norm", a.tensor("input"), p, dims, a.boolean("keepdim"), requested_dtype(a));
}

CaptureResult bind_logsumexp(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "logsumexp(Tensor input, int[] dim, bool keepdim=False)");
  ValueId x = a.tensor("input");
  ST dt;
  result_dtype(OpId::logsumexp, "logsumexp", c.graph.meta(x).dtype, std::nullopt, c.ctx.default_dtype, dt);
  auto dims = a.ints("dim");
  bool keepdim = a.boolean("keepdim");
  TensorMeta out;
  if (auto err = reduce_meta(c, "logsumexp", x, dims, keepdim, dt, out)) return CaptureResult::fail(*err);
  return tensor_result(
      emit1(c.graph, OpId::logsumexp, {Arg::of_value(x), Arg::of_ints(dims), Arg::of_bool(keepdim)}, out));
}

CaptureResult bind_count_nonzero(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "count_nonzero(Tensor input, int[]? dim=None)");
  ValueId x = a.tensor("input");
  std::vector<int64_t> dims;
  if (a.is_none("dim")) {  // every dim, spelled out: the IntList overload is the one we record
    for (int64_t i = 0; i < c.graph.meta(x).dim(); ++i) dims.push_back(i);
  } else {
    dims = a.ints("dim");
    if (dims.empty()) return CaptureResult::fail("count_nonzero: an empty 'dim' list is not supported");
  }
  TensorMeta out;
  ST dt;
  result_dtype(OpId::count_nonzero_dim_IntList, "count_nonzero", c.graph.meta(x).dtype, std::nullopt,
               c.ctx.default_dtype, dt);
  if (auto err = reduce_meta(c, "count_nonzero", x, dims, false, dt, out)) return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, OpId::count_nonzero_dim_IntList, {Arg::of_value(x), Arg::of_ints(dims)}, out));
}

namespace {
// cumsum / cumprod: same shape, contiguous, integral -> int64 unless dtype= says otherwise.
CaptureResult record_scan(BindCall& c, const Signature& sig, OpId op) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  int64_t d = a.integer("dim");
  if (!wrap_dim(d, m.dim()))
    return CaptureResult::fail(sig.name() + ": dim " + std::to_string(d) + " out of range for a " +
                               std::to_string(m.dim()) + "-d tensor");
  auto req = requested_dtype(a);
  ST dt;
  result_dtype(op, sig.name(), m.dtype, req, c.ctx.default_dtype, dt);
  TensorMeta out = contiguous_meta(dt, m.device, m.sizes, any_requires_grad(c.graph, c.ctx, {x}));
  return tensor_result(
      emit1(c.graph, op, {Arg::of_value(x), Arg::of_int(d), req ? Arg::of_dtype(*req) : Arg::none()}, out));
}

// softmax / log_softmax: contiguous output of the input's (or dtype=) dtype, which must be floating.
CaptureResult record_softmax(BindCall& c, const BoundArgs& a, const std::string& name, OpId op) {
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  int64_t d;
  if (a.is_none("dim")) {
    // F.softmax's implicit dim (deprecated in eager, but still what it computes).
    d = (m.dim() == 0 || m.dim() == 1 || m.dim() == 3) ? 0 : 1;
  } else {
    d = a.integer("dim");
  }
  if (!wrap_dim(d, m.dim()))
    return CaptureResult::fail(name + ": dim " + std::to_string(d) + " out of range for a " +
                               std::to_string(m.dim()) + "-d tensor");
  auto req = requested_dtype(a);
  ST dt;
  if (auto err = result_dtype(op, name, m.dtype, req, c.ctx.default_dtype, dt)) return CaptureResult::fail(*err);
  TensorMeta out = contiguous_meta(dt, m.device, m.sizes, any_requires_grad(c.graph, c.ctx, {x}));
  return tensor_result(
      emit1(c.graph, op, {Arg::of_value(x), Arg::of_int(d), req ? Arg::of_dtype(*req) : Arg::none()}, out));
}
}  // namespace

CaptureResult bind_cumsum(BindCall& c) {
  static const Signature sig("cumsum(Tensor input, int dim, *, ScalarType? dtype=None)");
  return record_scan(c, sig, OpId::cumsum);
}
CaptureResult bind_cumprod(BindCall& c) {
  static const Signature sig("cumprod(Tensor input, int dim, *, ScalarType? dtype=None)");
  return record_scan(c, sig, OpId::cumprod);
}

// torch.softmax(input, dim, dtype) and F.softmax(input, dim=None, _stacklevel=3, dtype=None)
// differ in their third positional parameter, hence two families per op.
#define FD_SOFTMAX_FAMILIES(fam, op)                                                                          \
  CaptureResult bind_##fam(BindCall& c) {                                                                     \
    static const Signature sig(#fam "(Tensor input, int dim, ScalarType? dtype=None)");                      \
    BoundArgs a;                                                                                              \
    if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);                                          \
    return record_softmax(c, a, #fam, OpId::op);                                                              \
  }                                                                                                           \
  CaptureResult bind_##fam##_fn(BindCall& c) {                                                                \
    static const Signature sig(#fam "(Tensor input, int? dim=None, int _stacklevel=3, ScalarType? dtype=None)"); \
    BoundArgs a;                                                                                              \
    if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);                                          \
    return record_softmax(c, a, #fam, OpId::op);                                                              \
  }
FD_SOFTMAX_FAMILIES(softmax, softmax_int)
FD_SOFTMAX_FAMILIES(log_softmax, log_softmax_int)
#undef FD_SOFTMAX_FAMILIES

}  // namespace fastdyn::codegen
