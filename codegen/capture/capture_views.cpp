// codegen/capture/capture_views.cpp — binders of the view, reshape, split and join families (subscripts:
// capture_subscript.cpp).
//
// Each binder binds the Python signature, validates the way eager does (errors name the op and
// the culprit), picks the ATen overload and computes its outputs' metadata with the layout rules
// of meta_views.h. Views are emitted as ATen view ops, so the aten backend returns real views
// (same storage) exactly where eager does. Calls that return their input unchanged in eager
// (`flatten(d, d)`, `contiguous()` on a contiguous tensor) emit nothing and return the input's
// value, so the result aliases as it does in eager.
#include "codegen/capture/binder.h"
#include "codegen/shapes/propagate.h"
#include "codegen/capture/meta_views.h"
#include "codegen/capture/view_helpers.h"
#include "runtime/errors.h"

#include <c10/core/MemoryFormat.h>

#include <algorithm>
#include <numeric>

namespace fastdyn::codegen {
namespace {

using meta::Ints;
using meta::MetaResult;
using namespace views;

// Wraps `dim` for an op; on failure fills `err` naming the op.
bool wrap(const char* op, int64_t& dim, int64_t ndim, CaptureResult& err) {
  std::string e;
  auto d = meta::wrap_dim(dim, ndim, e);
  if (!d) {
    err = fail(op, e);
    return false;
  }
  dim = *d;
  return true;
}

Arg memory_format_arg(c10::MemoryFormat f) { return Arg::of_int(static_cast<int64_t>(f)); }

// ---- emitters shared by several families -------------------------------------------------

// `sym`: the shape's expressions over size symbols, when some are symbolic (else empty).
ValueId emit_view(BindCall& c, ValueId self, const Ints& shape, const TensorMeta& out, const std::vector<shapes::SizeExpr>& sym = {}) {
  return emit1(c.graph, OpId::view, {Arg::of_value(self), ints_arg(shape, sym)}, out);
}

ValueId emit_permute(BindCall& c, ValueId self, const Ints& dims) {
  MetaResult r = meta::permute(c.graph.meta(self), dims);
  FD_CHECK(r.ok(), "permute with checked dims failed: " + r.error);
  return emit1(c.graph, OpId::permute, {Arg::of_value(self), Arg::of_ints(dims)}, r.meta);
}

ValueId emit_transpose(BindCall& c, ValueId self, int64_t d0, int64_t d1) {
  TensorMeta out = meta::transpose(c.graph.meta(self), d0, d1);
  return emit1(c.graph, OpId::transpose_int, {Arg::of_value(self), Arg::of_int(d0), Arg::of_int(d1)},
               out);
}

// expand(self, sizes) after validation; `sizes` as the user gave them (-1 allowed).
// `sym`: the sizes' expressions where they come from sizes (x.expand(b, t) with t = y.shape[1]).
CaptureResult expand_to(BindCall& c, const char* op, ValueId self, const Ints& sizes, const std::vector<shapes::SizeExpr>& sym = {}) {
  MetaResult r = meta::expand(c.graph.meta(self), sizes);
  if (!r.ok()) return fail(op, r.error);
  return tensor_result(emit1(c.graph, OpId::expand, {Arg::of_value(self), ints_arg(sizes, sym), Arg::of_bool(false)},
                             r.meta));
}

ValueId emit_clone(BindCall& c, ValueId self, std::optional<c10::MemoryFormat> format) {
  const TensorMeta& m = c.graph.meta(self);
  Ints strides = format ? contiguous_strides(m.sizes) : preserve_format_strides(m);
  return emit1(c.graph, OpId::clone, {Arg::of_value(self), format ? memory_format_arg(*format) : Arg::none()},
               derived(c, meta::fresh(m, m.sizes, strides), {self}));
}

// reshape: a view when the strides allow one, else a contiguous copy viewed to the new shape.
// NB: `shape` by value: it may be another value's sizes, which a clone's new value moves.
CaptureResult reshape_to(BindCall& c, const char* op, ValueId self, Ints shape, std::vector<shapes::SizeExpr> sym = {}) {
  const TensorMeta& m = c.graph.meta(self);
  std::string err;
  auto sizes = meta::infer_size(shape, m.numel(), err);
  if (!sizes) return fail(op, err);
  MetaResult r = meta::view(m, *sizes);
  if (!r.ok()) {
    ValueId copy = emit_clone(c, self, c10::MemoryFormat::Contiguous);
    self = copy;
    r = meta::view(c.graph.meta(copy), *sizes);
    FD_CHECK(r.ok(), "view of a contiguous copy failed: " + r.error);
  }
  return tensor_result(emit_view(c, self, shape, r.meta, sym));
}

// NB: the node keeps the shape as given, -1 included (ATen resolves it again): with sizes as
// symbols, the -1 is what says which dim takes the rest (codegen/shapes/propagate.cpp).
CaptureResult view_to(BindCall& c, const char* op, ValueId self, const Ints& shape, const std::vector<shapes::SizeExpr>& sym = {}) {
  MetaResult r = meta::view(c.graph.meta(self), shape);
  if (!r.ok()) return fail(op, r.error);
  return tensor_result(emit_view(c, self, shape, r.meta, sym));
}

// Wraps every entry of `dims` against `ndim`.
bool wrap_all(const char* op, Ints& dims, int64_t ndim, CaptureResult& err) {
  for (int64_t& d : dims)
    if (!wrap(op, d, ndim, err)) return false;
  return true;
}

// An `Any` parameter that should hold a list of ints: IntList, or a tuple whose items are ints.
std::optional<Ints> int_list(const CallArg& a) {
  if (a.kind == CallArg::Kind::IntList) return a.ints;
  if (a.kind != CallArg::Kind::Tuple) return std::nullopt;
  Ints out;
  for (const CallArg& it : a.items) {
    if (it.kind != CallArg::Kind::Int) return std::nullopt;
    out.push_back(it.i);
  }
  return out;
}

}  // namespace

// ---- view / reshape ------------------------------------------------------------------------

CaptureResult bind_view(BindCall& call) {
  // x.view(dtype) reinterprets the bytes (an overload Signature cannot express: dispatch by kind).
  if (call.args.size() == 2 && call.args[1].kind == CallArg::Kind::DType && call.args[0].kind == CallArg::Kind::Tensor) {
    ValueId self = call.args[0].value;
    const c10::ScalarType to = call.args[1].dtype;
    MetaResult r = meta::view_dtype(call.graph.meta(self), to);
    if (!r.ok()) return fail("view", r.error);
    r.meta.requires_grad = false;  // eager: a reinterpreting view is not differentiable
    return tensor_result(emit1(call.graph, OpId::view_dtype, {Arg::of_value(self), Arg::of_dtype(to)}, r.meta));
  }
  FD_BIND_OR_RETURN(call, a, "view(Tensor input, int[] *size)");
  return view_to(call, "view", a.tensor("input"), a.ints("size"), a.sym_ints("size"));
}

CaptureResult bind_view_as(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "view_as(Tensor input, Tensor other)");
  const TensorMeta& other = call.graph.meta(a.tensor("other"));
  return view_to(call, "view_as", a.tensor("input"), other.sizes, shapes::sizes_of(other));
}

CaptureResult bind_reshape(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "reshape(Tensor input, int[] *shape)");
  return reshape_to(call, "reshape", a.tensor("input"), a.ints("shape"), a.sym_ints("shape"));
}

CaptureResult bind_reshape_as(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "reshape_as(Tensor input, Tensor other)");
  const TensorMeta& other = call.graph.meta(a.tensor("other"));
  return reshape_to(call, "reshape_as", a.tensor("input"), other.sizes, shapes::sizes_of(other));
}

CaptureResult bind_flatten(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "flatten(Tensor input, int start_dim=0, int end_dim=-1)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  int64_t s = a.integer("start_dim"), e = a.integer("end_dim");
  if (!wrap("flatten", s, m.dim(), err) || !wrap("flatten", e, m.dim(), err)) return err;
  if (m.dim() == 0) return reshape_to(call, "flatten", self, {1});
  if (s > e) return fail("flatten", "flatten() has invalid args: start_dim cannot come after end_dim");
  if (s == e) return tensor_result(self);  // eager returns self itself
  Ints shape(m.sizes.begin(), m.sizes.begin() + s);
  shape.push_back(std::accumulate(m.sizes.begin() + s, m.sizes.begin() + e + 1, int64_t{1}, std::multiplies<>()));
  shape.insert(shape.end(), m.sizes.begin() + e + 1, m.sizes.end());
  // The same shape over size symbols: flatten keeps them (the product of the flattened dims).
  const std::vector<shapes::SizeExpr> dims = shapes::sizes_of(m);
  std::vector<shapes::SizeExpr> sym(dims.begin(), dims.begin() + s);
  shapes::SizeExpr prod(1);
  for (int64_t d = s; d <= e; ++d) prod = prod * dims[static_cast<size_t>(d)];
  sym.push_back(prod);
  sym.insert(sym.end(), dims.begin() + e + 1, dims.end());
  return reshape_to(call, "flatten", self, shape, sym);
}

CaptureResult bind_unflatten(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "unflatten(Tensor input, int dim, int[] sizes)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  int64_t dim = a.integer("dim");
  if (!wrap("unflatten", dim, m.dim(), err)) return err;
  Ints sizes = a.ints("sizes");
  if (sizes.empty()) return fail("unflatten", "sizes must be non-empty");
  std::string e;
  const int64_t dim_size = m.dim() == 0 ? 1 : m.sizes[dim];
  auto inferred = meta::infer_size(sizes, dim_size, e);
  if (!inferred)
    return fail("unflatten", "Provided sizes " + meta::format_ints(sizes) + " don't multiply up to the size of dim " +
                                 std::to_string(dim) + " (" + std::to_string(dim_size) + ") in the input tensor");
  Ints shape(m.sizes.begin(), m.sizes.begin() + dim);
  shape.insert(shape.end(), inferred->begin(), inferred->end());
  if (m.dim() > 0) shape.insert(shape.end(), m.sizes.begin() + dim + 1, m.sizes.end());
  return view_to(call, "unflatten", self, shape);
}

// ---- dimension shuffles ----------------------------------------------------------------------

CaptureResult bind_permute(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "permute(Tensor input, int[] *dims)");
  ValueId self = a.tensor("input");
  Ints dims = a.ints("dims");
  MetaResult r = meta::permute(call.graph.meta(self), dims);
  if (!r.ok()) return fail("permute", r.error);
  return tensor_result(emit1(call.graph, OpId::permute, {Arg::of_value(self), Arg::of_ints(dims)},
                             r.meta));
}

CaptureResult bind_transpose(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "transpose(Tensor input, int dim0, int dim1)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const int64_t n = call.graph.meta(self).dim();
  int64_t d0 = a.integer("dim0"), d1 = a.integer("dim1");
  if (!wrap("transpose", d0, n, err) || !wrap("transpose", d1, n, err)) return err;
  return tensor_result(emit_transpose(call, self, d0, d1));
}

CaptureResult bind_t(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "t(Tensor input)");
  ValueId self = a.tensor("input");
  const int64_t n = call.graph.meta(self).dim();
  if (n > 2) return fail("t", "t() expects a tensor with <= 2 dimensions, but self is " + std::to_string(n) + "D");
  return tensor_result(emit_transpose(call, self, 0, n < 2 ? 0 : 1));
}

namespace {
// Tensor.T / .H on a real tensor: all dims reversed.
CaptureResult reversed_dims(BindCall& call, const char* op, bool matrices_only) {
  if (call.args.size() != 1 || call.args[0].kind != CallArg::Kind::Tensor) return fail(op, "expects one tensor");
  ValueId self = call.args[0].value;
  const TensorMeta& m = call.graph.meta(self);
  if (matrices_only && m.dim() != 0 && m.dim() != 2)
    return fail(op, "tensor.H is only supported on matrices (2-D tensors). Got " + std::to_string(m.dim()) + "-D tensor.");
  if (c10::isComplexType(m.dtype) && matrices_only) return fail(op, "conjugate views of complex tensors are not supported");
  if (m.dim() == 0 && matrices_only) return tensor_result(self);  // eager: x.H is x for a real 0-dim x
  if (m.dim() == 0) return tensor_result(emit1(call.graph, OpId::alias, {Arg::of_value(self)}, m));
  Ints dims(static_cast<size_t>(m.dim()));
  for (int64_t i = 0; i < m.dim(); ++i) dims[i] = m.dim() - 1 - i;
  return tensor_result(emit_permute(call, self, dims));
}

// Tensor.mT / .mH: the last two dims swapped.
CaptureResult matrix_transpose(BindCall& call, const char* op, bool conj) {
  if (call.args.size() != 1 || call.args[0].kind != CallArg::Kind::Tensor) return fail(op, "expects one tensor");
  ValueId self = call.args[0].value;
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() == 0) return tensor_result(self);  // deprecated identity in eager: x.mT is x
  if (m.dim() < 2)
    return fail(op, std::string("tensor.") + (op + 7) + " is only supported on matrices or batches of matrices. Got " +
                        std::to_string(m.dim()) + "-D tensor.");
  if (conj && c10::isComplexType(m.dtype)) return fail(op, "conjugate views of complex tensors are not supported");
  return tensor_result(emit_transpose(call, self, m.dim() - 2, m.dim() - 1));
}
}  // namespace

CaptureResult bind_prop_T(BindCall& call) { return reversed_dims(call, "Tensor.T", false); }
CaptureResult bind_prop_H(BindCall& call) { return reversed_dims(call, "Tensor.H", true); }
CaptureResult bind_prop_mT(BindCall& call) { return matrix_transpose(call, "Tensor.mT", false); }
CaptureResult bind_prop_mH(BindCall& call) { return matrix_transpose(call, "Tensor.mH", true); }

CaptureResult bind_movedim(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "movedim(Tensor input, int[] source, int[] destination)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const int64_t n = call.graph.meta(self).dim();
  Ints src = a.ints("source"), dst = a.ints("destination");
  if (src.size() != dst.size())
    return fail("movedim", "Invalid source or destination dims: source (" + meta::format_ints(src) +
                               " dims) should contain the same number of dims as destination (" +
                               meta::format_ints(dst) + " dims)");
  if (!wrap_all("movedim", src, n, err) || !wrap_all("movedim", dst, n, err)) return err;
  Ints order(static_cast<size_t>(std::max<int64_t>(n, 0)), -1);
  std::vector<bool> used(order.size(), false);
  for (size_t i = 0; i < src.size(); ++i) {
    if (n == 0) break;
    if (order[dst[i]] != -1) return fail("movedim", "repeated dim in `destination` (" + meta::format_ints(a.ints("destination")) + ")");
    if (used[src[i]]) return fail("movedim", "repeated dim in `source` (" + meta::format_ints(a.ints("source")) + ")");
    order[dst[i]] = src[i];
    used[src[i]] = true;
  }
  // The remaining dims keep their relative order in the free slots.
  size_t next = 0;
  for (auto& o : order) {
    if (o != -1) continue;
    while (used[next]) ++next;
    o = static_cast<int64_t>(next);
    used[next] = true;
  }
  if (n == 0) return tensor_result(emit1(call.graph, OpId::alias, {Arg::of_value(self)},
                                         call.graph.meta(self)));
  return tensor_result(emit_permute(call, self, order));
}

CaptureResult bind_unsqueeze(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "unsqueeze(Tensor input, int dim)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  int64_t dim = a.integer("dim");
  if (!wrap("unsqueeze", dim, call.graph.meta(self).dim() + 1, err)) return err;
  return tensor_result(emit_unsqueeze(call, self, dim));
}

CaptureResult bind_squeeze(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "squeeze(Tensor input, Any dim=None)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  const CallArg& d = a.get("dim");
  if (d.kind == CallArg::Kind::None) {
    Ints all(static_cast<size_t>(m.dim()));
    std::iota(all.begin(), all.end(), 0);
    return tensor_result(emit1(call.graph, OpId::squeeze, {Arg::of_value(self)},
                               meta::squeeze(m, all)));
  }
  if (d.kind == CallArg::Kind::Int) {
    int64_t dim = d.i;
    if (!wrap("squeeze", dim, m.dim(), err)) return err;
    return tensor_result(emit1(call.graph, OpId::squeeze_dim, {Arg::of_value(self), Arg::of_int(d.i)},
                               meta::squeeze(m, {dim})));
  }
  if (auto given = int_list(d)) {
    Ints dims = *given;
    if (!wrap_all("squeeze", dims, m.dim(), err)) return err;
    return tensor_result(emit1(call.graph, OpId::squeeze_dims, {Arg::of_value(self), Arg::of_ints(*given)},
                               meta::squeeze(m, dims)));
  }
  return fail("squeeze", "argument 'dim' must be int or tuple of ints");
}

// ---- expand ----------------------------------------------------------------------------------

CaptureResult bind_expand(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "expand(Tensor input, int[] *size)");
  return expand_to(call, "expand", a.tensor("input"), a.ints("size"), a.sym_ints("size"));
}

CaptureResult bind_expand_as(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "expand_as(Tensor input, Tensor other)");
  const TensorMeta& other = call.graph.meta(a.tensor("other"));
  const Ints sizes = other.sizes;  // NB: a copy: emitting the node grows the graph's values
  return expand_to(call, "expand_as", a.tensor("input"), sizes, shapes::sizes_of(other));
}

CaptureResult bind_broadcast_to(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "broadcast_to(Tensor input, int[] size)");
  return expand_to(call, "broadcast_to", a.tensor("input"), a.ints("size"), a.sym_ints("size"));
}

// ---- copies ----------------------------------------------------------------------------------

CaptureResult bind_contiguous(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "contiguous(Tensor input, *, MemoryFormat? memory_format=None)");
  if (a.memory_format("memory_format").value_or(c10::MemoryFormat::Contiguous) != c10::MemoryFormat::Contiguous)
    return fail("contiguous", "only memory_format=torch.contiguous_format is supported");
  ValueId self = a.tensor("input");
  if (is_contiguous(call.graph.meta(self))) return tensor_result(self);  // eager returns self itself
  return tensor_result(emit_clone(call, self, c10::MemoryFormat::Contiguous));
}

CaptureResult bind_clone(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "clone(Tensor input, *, MemoryFormat? memory_format=None)");
  const c10::MemoryFormat format = a.memory_format("memory_format").value_or(c10::MemoryFormat::Preserve);
  if (format == c10::MemoryFormat::Preserve) return tensor_result(emit_clone(call, a.tensor("input"), std::nullopt));
  if (format == c10::MemoryFormat::Contiguous) return tensor_result(emit_clone(call, a.tensor("input"), format));
  return fail("clone", "only memory_format=torch.contiguous_format or torch.preserve_format is supported");
}

CaptureResult bind_flip(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "flip(Tensor input, int[] *dims)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  Ints dims = a.ints("dims");
  if (!wrap_all("flip", dims, m.dim(), err)) return err;
  for (size_t i = 0; i < dims.size(); ++i)
    if (std::count(dims.begin(), dims.end(), dims[i]) > 1)
      return fail("flip", "dim " + std::to_string(dims[i]) + " appears multiple times in the list of dims");
  TensorMeta out = meta::fresh(m, m.sizes, preserve_format_strides(m));
  return tensor_result(emit1(call.graph, OpId::flip, {Arg::of_value(self), Arg::of_ints(a.ints("dims"))},
                             derived(call, out, {self})));
}

CaptureResult bind_roll(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "roll(Tensor input, int[] shifts, int[] dims=[])");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  Ints shifts = a.ints("shifts"), dims = a.ints("dims");
  if (dims.empty() ? shifts.size() != 1 : shifts.size() != dims.size())
    return fail("roll", "shifts and dimensions must align. shifts: " + std::to_string(shifts.size()) +
                            ", dims:" + std::to_string(dims.size()));
  Ints wrapped = dims;
  if (!wrap_all("roll", wrapped, m.dim(), err)) return err;
  return tensor_result(emit1(call.graph, OpId::roll, {Arg::of_value(self), Arg::of_ints(shifts), Arg::of_ints(dims)},
                             derived(call, meta::fresh_contiguous(m, m.sizes), {self})));
}

namespace {
CaptureResult repeat_by(BindCall& call, const char* op, ValueId self, const Ints& repeats) {
  const TensorMeta& m = call.graph.meta(self);
  if (static_cast<int64_t>(repeats.size()) < m.dim())
    return fail(op, "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  Ints sizes(repeats.size());
  const size_t pad = repeats.size() - m.sizes.size();
  for (size_t i = 0; i < repeats.size(); ++i) {
    if (repeats[i] < 0) return fail(op, "Trying to create tensor with negative dimension " + std::to_string(repeats[i]));
    sizes[i] = repeats[i] * (i < pad ? 1 : m.sizes[i - pad]);
  }
  return tensor_result(emit1(call.graph, OpId::repeat, {Arg::of_value(self), Arg::of_ints(repeats)},
                             derived(call, meta::fresh_contiguous(m, sizes), {self})));
}
}  // namespace

CaptureResult bind_repeat(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "repeat(Tensor input, int[] *repeats)");
  return repeat_by(call, "repeat", a.tensor("input"), a.ints("repeats"));
}

CaptureResult bind_tile(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "tile(Tensor input, int[] *dims)");
  ValueId self = a.tensor("input");
  Ints reps = a.ints("dims");
  const size_t n = static_cast<size_t>(call.graph.meta(self).dim());
  if (reps.size() < n) reps.insert(reps.begin(), n - reps.size(), 1);  // tile pads with leading ones
  return repeat_by(call, "tile", self, reps);
}

CaptureResult bind_repeat_interleave(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "repeat_interleave(Tensor input, Any repeats, int? dim=None, *, int? output_size=None)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  const CallArg& rep = a.get("repeats");
  if (rep.kind != CallArg::Kind::Int)
    return fail("repeat_interleave", "tensor 'repeats' give a data-dependent output shape; only an int is supported");
  if (rep.i < 0) return fail("repeat_interleave", "repeats can not be negative");
  Ints sizes;
  Arg dim_arg = Arg::none();
  if (a.is_none("dim")) {
    sizes = {m.numel() * rep.i};
  } else {
    int64_t dim = a.integer("dim");
    if (!wrap("repeat_interleave", dim, m.dim(), err)) return err;
    sizes = m.sizes;
    if (!sizes.empty()) sizes[dim] *= rep.i;
    else sizes = {rep.i};
    dim_arg = Arg::of_int(a.integer("dim"));
  }
  Arg output_size = a.is_none("output_size") ? Arg::none() : Arg::of_int(a.integer("output_size"));
  return tensor_result(emit1(call.graph, OpId::repeat_interleave_self_int,
                             {Arg::of_value(self), Arg::of_int(rep.i), dim_arg, output_size},
                             derived(call, meta::fresh_contiguous(m, sizes), {self})));
}

namespace {
CaptureResult triangle(BindCall& call, const char* op, OpId id) {
  FD_BIND_OR_RETURN(call, a, "tril(Tensor input, int diagonal=0)");
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() < 2) return fail(op, "input tensor must have at least 2 dimensions");
  return tensor_result(emit1(call.graph, id, {Arg::of_value(self), Arg::of_int(a.integer("diagonal"))},
                             derived(call, meta::fresh_contiguous(m, m.sizes), {self})));
}
}  // namespace

CaptureResult bind_tril(BindCall& call) { return triangle(call, "tril", OpId::tril); }
CaptureResult bind_triu(BindCall& call) { return triangle(call, "triu", OpId::triu); }

// ---- narrowing views -------------------------------------------------------------------------

CaptureResult bind_narrow(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "narrow(Tensor input, int dim, int start, int length)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  int64_t dim = a.integer("dim");
  if (!wrap("narrow", dim, m.dim(), err)) return err;
  MetaResult r = meta::narrow(m, dim, a.integer("start"), a.integer("length"));
  if (!r.ok()) return fail("narrow", r.error);
  int64_t start = a.integer("start");
  if (start < 0) start += m.sizes[dim];
  return tensor_result(emit_slice(call, self, dim, start, start + a.integer("length"), 1));
}

CaptureResult bind_select(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "select(Tensor input, int dim, int index)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  int64_t dim = a.integer("dim");
  if (!wrap("select", dim, m.dim(), err)) return err;
  MetaResult r = meta::select(m, dim, a.integer("index"));
  if (!r.ok()) return fail("select", r.error);
  return tensor_result(emit1(call.graph, OpId::select_int,
                             {Arg::of_value(self), Arg::of_int(dim), Arg::of_int(a.integer("index"))},
                             r.meta));
}

CaptureResult bind_diagonal(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "diagonal(Tensor input, int offset=0, int dim1=0, int dim2=1)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  int64_t d1 = a.integer("dim1"), d2 = a.integer("dim2");
  if (m.dim() < 2) return fail("diagonal", "diagonal dimensions requires ndim larger than 1, but got " + std::to_string(m.dim()));
  if (!wrap("diagonal", d1, m.dim(), err) || !wrap("diagonal", d2, m.dim(), err)) return err;
  if (d1 == d2)
    return fail("diagonal", "diagonal dimensions cannot be identical " + std::to_string(a.integer("dim1")) + ", " +
                                std::to_string(a.integer("dim2")));
  TensorMeta out = meta::diagonal(m, a.integer("offset"), d1, d2);
  return tensor_result(emit1(call.graph, OpId::diagonal,
                             {Arg::of_value(self), Arg::of_int(a.integer("offset")), Arg::of_int(d1), Arg::of_int(d2)},
                             out));
}

// torch.diag of a matrix: its diagonal as a new (contiguous) vector. Of a vector (a diagonal
// matrix) it is not recorded: the call breaks and runs eagerly.
CaptureResult bind_diag(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "diag(Tensor input, int diagonal=0)");
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() != 2) return fail("diag", "only a matrix's diagonal is recorded, not a " + std::to_string(m.dim()) + "-d input's");
  const int64_t offset = a.integer("diagonal");
  ValueId d = emit1(call.graph, OpId::diagonal, {Arg::of_value(self), Arg::of_int(offset), Arg::of_int(0), Arg::of_int(1)},
                    meta::diagonal(m, offset, 0, 1));
  return tensor_result(emit_clone(call, d, c10::MemoryFormat::Contiguous));
}

// detach: the same elements (a view), outside autograd.
CaptureResult bind_detach(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "detach(Tensor input)");
  ValueId self = a.tensor("input");
  TensorMeta out = call.graph.meta(self);
  out.requires_grad = false;
  return tensor_result(emit1(call.graph, OpId::detach, {Arg::of_value(self)}, out));
}

CaptureResult bind_unfold(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "unfold(Tensor input, int dimension, int size, int step)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  int64_t dim = a.integer("dimension");
  if (!wrap("unfold", dim, m.dim(), err)) return err;
  MetaResult r = meta::unfold(m, dim, a.integer("size"), a.integer("step"));
  if (!r.ok()) return fail("unfold", r.error);
  return tensor_result(emit1(call.graph, OpId::unfold,
                             {Arg::of_value(self), Arg::of_int(dim), Arg::of_int(a.integer("size")),
                              Arg::of_int(a.integer("step"))},
                             r.meta));
}

// ---- splits ----------------------------------------------------------------------------------

namespace {
// Emits one multi-output view node whose pieces are `sizes` along `dim`.
CaptureResult emit_pieces(BindCall& call, OpId op, std::vector<Arg> args, ValueId self, int64_t dim, const Ints& sizes) {
  std::vector<TensorMeta> outs;
  for (auto& piece : meta::split_sizes_views(call.graph.meta(self), dim, sizes))
    outs.push_back(piece);
  return tuple_result(emit(call.graph, op, std::move(args), std::move(outs)));
}

CaptureResult split_by_size(BindCall& call, const char* op, ValueId self, int64_t split_size, int64_t dim) {
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() == 0) return fail(op, "split expects at least a 1-dimensional tensor");
  if (split_size < 0) return fail(op, "split expects split_size be non-negative, but got split_size=" + std::to_string(split_size));
  const int64_t n = m.sizes[dim];
  if (split_size == 0 && n != 0)
    return fail(op, "split_size can only be 0 if dimension size is 0, but got dimension size of " + std::to_string(n));
  const int64_t pieces = split_size == 0 ? 1 : std::max<int64_t>((n + split_size - 1) / split_size, 1);
  Ints sizes(static_cast<size_t>(pieces), split_size);
  sizes.back() = n - split_size * (pieces - 1);
  return emit_pieces(call, OpId::split_Tensor, {Arg::of_value(self), Arg::of_int(split_size), Arg::of_int(dim)}, self, dim,
                     sizes);
}

CaptureResult split_by_sizes(BindCall& call, const char* op, ValueId self, const Ints& sizes, int64_t dim) {
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() == 0) return fail(op, "split expects at least a 1-dimensional tensor");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return fail(op, "split_with_sizes expects split_sizes have only non-negative entries, but got split_sizes=" +
                                   meta::format_ints(sizes));
    total += s;
  }
  if (total != m.sizes[dim])
    return fail(op, "split_with_sizes expects split_sizes to sum exactly to " + std::to_string(m.sizes[dim]) +
                        " (input tensor's size at dimension " + std::to_string(dim) + "), but got split_sizes=" +
                        meta::format_ints(sizes));
  return emit_pieces(call, OpId::split_with_sizes, {Arg::of_value(self), Arg::of_ints(sizes), Arg::of_int(dim)}, self, dim,
                     sizes);
}
}  // namespace

CaptureResult bind_split(BindCall& call) {
  static const Signature sig("split(Tensor tensor, Any split_size_or_sections, int dim=0)");
  // Tensor.split spells the parameter `split_size`; torch.split `split_size_or_sections`.
  std::vector<std::pair<std::string, CallArg>> kwargs = call.kwargs;
  for (auto& kw : kwargs)
    if (kw.first == "split_size") kw.first = "split_size_or_sections";
  BoundArgs a;
  CaptureResult err;
  if (auto e = sig.bind(call.args, kwargs, a)) return CaptureResult::fail(*e);
  ValueId self = a.tensor("tensor");
  int64_t dim = a.integer("dim");
  if (!wrap("split", dim, call.graph.meta(self).dim(), err)) return err;
  const CallArg& s = a.get("split_size_or_sections");
  if (s.kind == CallArg::Kind::Int) return split_by_size(call, "split", self, s.i, dim);
  if (auto sizes = int_list(s)) return split_by_sizes(call, "split", self, *sizes, dim);
  return fail("split", "argument 'split_size_or_sections' must be int or list of ints");
}

CaptureResult bind_chunk(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "chunk(Tensor input, int chunks, int dim=0)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() == 0) return fail("chunk", "chunk expects at least a 1-dimensional tensor");
  const int64_t chunks = a.integer("chunks");
  if (chunks <= 0) return fail("chunk", "chunk expects `chunks` to be greater than 0, got: " + std::to_string(chunks));
  int64_t dim = a.integer("dim");
  if (!wrap("chunk", dim, m.dim(), err)) return err;
  const int64_t n = m.sizes[dim];
  const int64_t split_size = (n + chunks - 1) / chunks;
  // An empty dim keeps the requested number of (empty) chunks: split_with_sizes, as eager.
  if (split_size == 0 && n == 0) return split_by_sizes(call, "chunk", self, Ints(static_cast<size_t>(chunks), 0), dim);
  return split_by_size(call, "chunk", self, split_size, dim);
}

CaptureResult bind_unbind(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "unbind(Tensor input, int dim=0)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() == 0) return fail("unbind", "Dimension specified as 0 but tensor has no dimensions");
  int64_t dim = a.integer("dim");
  if (!wrap("unbind", dim, m.dim(), err)) return err;
  std::vector<TensorMeta> outs;
  for (int64_t i = 0; i < m.sizes[dim]; ++i) outs.push_back(meta::select(m, dim, i).meta);
  return tuple_result(emit(call.graph, OpId::unbind_int, {Arg::of_value(self), Arg::of_int(dim)}, std::move(outs)));
}

CaptureResult bind_tensor_split(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "tensor_split(Tensor input, Any indices_or_sections, int dim=0)");
  CaptureResult err;
  ValueId self = a.tensor("input");
  const TensorMeta& m = call.graph.meta(self);
  if (m.dim() == 0)
    return fail("tensor_split", "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims");
  int64_t dim = a.integer("dim");
  if (!wrap("tensor_split", dim, m.dim(), err)) return err;
  const CallArg& how = a.get("indices_or_sections");
  std::vector<TensorMeta> outs;
  if (how.kind == CallArg::Kind::Int) {
    const int64_t sections = how.i;
    if (sections <= 0) return fail("tensor_split", "number of sections must be larger than 0, got " + std::to_string(sections));
    // The first size % sections pieces are one longer.
    const int64_t n = m.sizes[dim], base = n / sections, extra = n % sections;
    Ints lengths;
    for (int64_t i = 0; i < sections; ++i) lengths.push_back(base + (i < extra ? 1 : 0));
    outs = meta::split_sizes_views(m, dim, lengths);
    return tuple_result(emit(call.graph, OpId::tensor_split_sections,
                             {Arg::of_value(self), Arg::of_int(sections), Arg::of_int(dim)}, std::move(outs)));
  }
  if (auto points = int_list(how)) {
    outs = meta::split_points_views(m, dim, *points);
    return tuple_result(emit(call.graph, OpId::tensor_split_indices,
                             {Arg::of_value(self), Arg::of_ints(*points), Arg::of_int(dim)}, std::move(outs)));
  }
  return fail("tensor_split", "argument 'indices_or_sections' must be an int or a list of ints (a tensor is data-dependent)");
}

// ---- joins -----------------------------------------------------------------------------------

namespace {
// cat's output: promoted dtype, the shared memory format of the inputs (else contiguous).
CaptureResult cat_values(BindCall& call, const char* op, const std::vector<ValueId>& ts, int64_t dim_arg) {
  if (ts.empty()) return fail(op, "expected a non-empty list of Tensors");
  const Graph& g = call.graph;
  // 1-d empty tensors are skipped by the shape checks (legacy behaviour kept by ATen).
  auto skipped = [&](ValueId v) { return g.meta(v).dim() == 1 && g.meta(v).sizes[0] == 0; };
  std::optional<size_t> ref;
  c10::ScalarType dtype = g.meta(ts[0]).dtype;
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorMeta& m = g.meta(ts[i]);
    if (m.dim() == 0)
      return fail(op, "zero-dimensional tensor (at position " + std::to_string(i) + ") cannot be concatenated");
    if (m.device != g.meta(ts[0]).device) return fail(op, "all input tensors must be on the same device");
    dtype = c10::promoteTypes(dtype, m.dtype);
    if (!ref && !skipped(ts[i])) ref = i;
  }
  const TensorMeta& r = g.meta(ts[ref.value_or(0)]);
  int64_t dim = dim_arg;
  CaptureResult err;
  if (!wrap(op, dim, r.dim(), err)) return err;
  Ints sizes = r.sizes;
  if (ref) {
    sizes[dim] = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      const TensorMeta& m = g.meta(ts[i]);
      if (skipped(ts[i])) continue;
      if (m.dim() != r.dim())
        return fail(op, "Tensors must have same number of dimensions: got " + std::to_string(r.dim()) + " and " +
                            std::to_string(m.dim()));
      for (int64_t d = 0; d < r.dim(); ++d)
        if (d != dim && m.sizes[d] != r.sizes[d])
          return fail(op, "Sizes of tensors must match except in dimension " + std::to_string(dim) + ". Expected size " +
                              std::to_string(r.sizes[d]) + " but got size " + std::to_string(m.sizes[d]) +
                              " for tensor number " + std::to_string(i) + " in the list.");
      sizes[dim] += m.sizes[dim];
    }
  }
  // Memory format: every input suggesting the same non-contiguous format keeps it.
  std::optional<meta::MemoryFormat> format;
  for (ValueId v : ts) {
    meta::MemoryFormat f = meta::suggest_memory_format(g.meta(v));
    if (f == meta::MemoryFormat::Contiguous || (format && *format != f)) {
      format = meta::MemoryFormat::Contiguous;
      break;
    }
    format = f;
  }
  TensorMeta out = meta::fresh(r, sizes, meta::strides_for_format(sizes, *format));
  out.dtype = dtype;
  return tensor_result(emit1(call.graph, OpId::cat, {Arg::of_values(ts), Arg::of_int(dim_arg)}, derived(call, out, ts)));
}

// Tensors reshaped to at least `n` dims, as atleast_1d / atleast_2d do (views).
std::vector<ValueId> at_least(BindCall& call, const std::vector<ValueId>& ts, int64_t n) {
  std::vector<ValueId> out;
  for (ValueId v : ts) {
    const TensorMeta& m = call.graph.meta(v);
    if (m.dim() >= n) {
      out.push_back(v);
    } else {
      Ints shape(static_cast<size_t>(n - m.dim()), 1);
      shape.insert(shape.end(), m.sizes.begin(), m.sizes.end());
      MetaResult r = meta::view(m, shape);
      out.push_back(emit_view(call, v, shape, r.meta));
    }
  }
  return out;
}
}  // namespace

CaptureResult bind_cat(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "cat(Tensor[] tensors, int dim=0, *, Any out=None)");
  if (!a.is_none("out")) return fail("cat", "out= is not supported");
  return cat_values(call, "cat", a.tensors("tensors"), a.integer("dim"));
}

CaptureResult bind_stack(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "stack(Tensor[] tensors, int dim=0, *, Any out=None)");
  CaptureResult err;
  if (!a.is_none("out")) return fail("stack", "out= is not supported");
  std::vector<ValueId> ts = a.tensors("tensors");
  if (ts.empty()) return fail("stack", "stack expects a non-empty TensorList");
  const TensorMeta& first = call.graph.meta(ts[0]);
  for (size_t i = 1; i < ts.size(); ++i)
    if (call.graph.meta(ts[i]).sizes != first.sizes)
      return fail("stack", "stack expects each tensor to be equal size, but got " + meta::format_ints(first.sizes) +
                               " at entry 0 and " + meta::format_ints(call.graph.meta(ts[i]).sizes) + " at entry " +
                               std::to_string(i));
  int64_t dim = a.integer("dim");
  if (!wrap("stack", dim, first.dim() + 1, err)) return err;
  c10::ScalarType dtype = first.dtype;
  for (ValueId v : ts) dtype = c10::promoteTypes(dtype, call.graph.meta(v).dtype);
  Ints sizes = first.sizes;
  sizes.insert(sizes.begin() + dim, static_cast<int64_t>(ts.size()));
  TensorMeta out = meta::fresh_contiguous(first, sizes);
  out.dtype = dtype;
  return tensor_result(emit1(call.graph, OpId::stack, {Arg::of_values(ts), Arg::of_int(dim)}, derived(call, out, ts)));
}

// meshgrid of 0-d and 1-d tensors: each a view of its input, reshaped to vary along its own dim
// (indexing="xy" swaps the first two) and expanded to the grid, as ATen's meshgrid returns them.
// indexing=None warns in eager: left to it.
CaptureResult bind_meshgrid(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "meshgrid(Tensor[] tensors, *, str? indexing=None)");
  if (a.is_none("indexing")) return fail("meshgrid", "indexing=None warns in eager (left to it)");
  const std::string indexing = a.str("indexing");
  if (indexing != "ij" && indexing != "xy") return fail("meshgrid", "indexing must be one of \"xy\" or \"ij\"");
  std::vector<ValueId> ts = a.tensors("tensors");
  if (ts.empty()) return fail("meshgrid", "expects a non-empty TensorList");
  const TensorMeta first = call.graph.meta(ts[0]);
  const size_t n = ts.size();
  Ints grid(n);
  for (size_t i = 0; i < n; ++i) {
    const TensorMeta& m = call.graph.meta(ts[i]);
    if (m.dim() > 1) return fail("meshgrid", "Expected 0D or 1D tensor in the tensor list");
    if (m.dtype != first.dtype || m.device != first.device) return fail("meshgrid", "expects all tensors to have the same dtype and device");
    grid[i] = m.dim() == 0 ? 1 : m.sizes[0];
  }
  const bool swap = indexing == "xy" && n >= 2;
  if (swap) std::swap(grid[0], grid[1]);
  std::vector<ValueId> outs;
  for (size_t i = 0; i < n; ++i) {
    const size_t along = swap && i < 2 ? 1 - i : i;
    Ints shape(n, 1);
    shape[along] = grid[along];
    MetaResult v = meta::view(call.graph.meta(ts[i]), shape);
    if (!v.ok()) return fail("meshgrid", v.error);
    ValueId shaped = emit_view(call, ts[i], shape, v.meta);
    CaptureResult e = expand_to(call, "meshgrid", shaped, grid);
    if (!e.ok) return e;
    outs.push_back(e.values[0]);
  }
  return tuple_result(outs);
}

CaptureResult bind_hstack(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "hstack(Tensor[] tensors, *, Any out=None)");
  std::vector<ValueId> ts = at_least(call, a.tensors("tensors"), 1);
  if (ts.empty()) return fail("hstack", "expects a non-empty TensorList");
  return cat_values(call, "hstack", ts, call.graph.meta(ts[0]).dim() == 1 ? 0 : 1);
}

CaptureResult bind_vstack(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "vstack(Tensor[] tensors, *, Any out=None)");
  std::vector<ValueId> ts = at_least(call, a.tensors("tensors"), 2);
  if (ts.empty()) return fail("vstack", "expects a non-empty TensorList");
  return cat_values(call, "vstack", ts, 0);
}

// ---- gathers ---------------------------------------------------------------------------------

CaptureResult bind_index_select(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "index_select(Tensor input, int dim, Tensor index)");
  CaptureResult err;
  ValueId self = a.tensor("input"), index = a.tensor("index");
  const TensorMeta& m = call.graph.meta(self);
  const TensorMeta& im = call.graph.meta(index);
  int64_t dim = a.integer("dim");
  if (!wrap("index_select", dim, m.dim(), err)) return err;
  if (im.dim() > 1) return fail("index_select", "Index is supposed to be a vector");
  if (!is_index_dtype(im.dtype)) return fail("index_select", "Expected dtype int32 or int64 for index");
  Ints sizes = m.sizes;
  if (!sizes.empty()) sizes[dim] = im.numel();
  else if (im.numel() != 1) return fail("index_select", "index_select(): Index to scalar can have only 1 value, got " +
                                                           std::to_string(im.numel()) + " value(s)");
  return tensor_result(emit1(call.graph, OpId::index_select, {Arg::of_value(self), Arg::of_int(dim), Arg::of_value(index)},
                             derived(call, meta::fresh_contiguous(m, sizes), {self})));
}

// ---- index_copy: rows of `source` written at `index` along `dim` --------------------------------

namespace {
// What ATen's index_copy_ accepts (a call it would refuse breaks the graph, and eager raises its
// own error): a Long index of at most one dim, a source of self's dtype, device and rank whose
// size along dim is the index's length and whose other sizes are self's. ok: the call is accepted.
CaptureResult check_index_copy(BindCall& call, const char* op, ValueId self, int64_t& dim, ValueId index, ValueId source) {
  const TensorMeta& m = call.graph.meta(self);
  const TensorMeta& im = call.graph.meta(index);
  const TensorMeta& sm = call.graph.meta(source);
  CaptureResult err;
  if (!wrap(op, dim, m.dim(), err)) return err;
  if (im.dtype != c10::ScalarType::Long) return fail(op, "index must be a long tensor");
  if (im.dim() > 1) return fail(op, "index must have at most one dimension");
  if (sm.dtype != m.dtype || sm.device != m.device || im.device != m.device)
    return fail(op, "self, index and source must share a device, and self and source a dtype");
  if (sm.dim() != m.dim() || m.dim() == 0) return fail(op, "source and self must have the same rank (at least 1)");
  for (int64_t d = 0; d < m.dim(); ++d)
    if (d != dim && sm.sizes[d] != m.sizes[d]) return fail(op, "source and self must have the same slice shapes");
  if (sm.sizes[dim] != im.numel()) return fail(op, "the index's length must be source.size(dim)");
  CaptureResult ok;
  ok.ok = true;
  return ok;
}
}  // namespace

// self.index_copy_(dim, index, source): an in-place op with no out-of-place twin in the graph;
// codegen/loop/functionalize.cpp runs it in place on a graph input (a static KV cache's update).
CaptureResult bind_index_copy_(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "index_copy_(Tensor self, int dim, Tensor index, Tensor source)");
  ValueId self = a.tensor("self"), index = a.tensor("index"), source = a.tensor("source");
  int64_t dim = a.integer("dim");
  if (CaptureResult c = check_index_copy(call, "index_copy_", self, dim, index, source); !c.ok) return c;
  TensorMeta out = call.graph.meta(self);
  out.requires_grad = out.requires_grad || call.graph.meta(source).requires_grad;
  return tensor_result(emit1(call.graph, OpId::index_copy_,
                             {Arg::of_value(self), Arg::of_int(dim), Arg::of_value(index), Arg::of_value(source)}, out));
}

// torch.index_copy(input, dim, index, source): a copy of input (its layout kept) with the rows written.
CaptureResult bind_index_copy(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "index_copy(Tensor input, int dim, Tensor index, Tensor source)");
  ValueId self = a.tensor("input"), index = a.tensor("index"), source = a.tensor("source");
  int64_t dim = a.integer("dim");
  if (CaptureResult c = check_index_copy(call, "index_copy", self, dim, index, source); !c.ok) return c;
  const TensorMeta& m = call.graph.meta(self);
  return tensor_result(emit1(call.graph, OpId::index_copy,
                             {Arg::of_value(self), Arg::of_int(dim), Arg::of_value(index), Arg::of_value(source)},
                             derived(call, meta::fresh(m, m.sizes, preserve_format_strides(m)), {self, source})));
}

namespace {
// gather after its argument checks; `index` already has self's rank.
CaptureResult gather_values(BindCall& call, const char* op, ValueId self, int64_t dim, ValueId index) {
  const TensorMeta& m = call.graph.meta(self);
  const TensorMeta& im = call.graph.meta(index);
  if (im.dtype != c10::ScalarType::Long) return fail(op, "gather(): Expected dtype int64 for index");
  if (std::max<int64_t>(m.dim(), 1) != std::max<int64_t>(im.dim(), 1))
    return fail(op, "Index tensor must have the same number of dimensions as input tensor");
  CaptureResult err;
  if (!wrap(op, dim, m.dim(), err)) return err;
  for (int64_t d = 0; d < im.dim() && m.dim() > 0; ++d)
    if (d != dim && im.sizes[d] > m.sizes[d])
      return fail(op, "Size does not match at dimension " + std::to_string(d) + " expected index " +
                          meta::format_ints(im.sizes) + " to be no larger than self " + meta::format_ints(m.sizes) +
                          " apart from dimension " + std::to_string(dim));
  TensorMeta out = meta::fresh_contiguous(m, im.sizes);
  return tensor_result(emit1(call.graph, OpId::gather,
                             {Arg::of_value(self), Arg::of_int(dim), Arg::of_value(index), Arg::of_bool(false)},
                             derived(call, out, {self})));
}
}  // namespace

CaptureResult bind_gather(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "gather(Tensor input, int dim, Tensor index, *, bool sparse_grad=False)");
  if (a.boolean("sparse_grad")) return fail("gather", "sparse_grad=True is not supported");
  return gather_values(call, "gather", a.tensor("input"), a.integer("dim"), a.tensor("index"));
}

CaptureResult bind_take_along_dim(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "take_along_dim(Tensor input, Tensor indices, int? dim=None)");
  CaptureResult err;
  ValueId self = a.tensor("input"), idx = a.tensor("indices");
  const TensorMeta m = call.graph.meta(self), im = call.graph.meta(idx);
  if (!is_index_dtype(im.dtype) || im.dtype != c10::ScalarType::Long)
    return fail("take_along_dim", "dtype of indices should be Long but got " + std::string(c10::toString(im.dtype)));
  if (a.is_none("dim")) {
    // Both flattened: self.view(-1).gather(0, indices.view(-1)).
    MetaResult fs = meta::view(m, {-1}), fi = meta::view(im, {-1});
    if (!fs.ok()) return fail("take_along_dim", fs.error);
    if (!fi.ok()) return fail("take_along_dim", fi.error);
    ValueId s = emit_view(call, self, fs.meta.sizes, fs.meta), i = emit_view(call, idx, fi.meta.sizes, fi.meta);
    return gather_values(call, "take_along_dim", s, 0, i);
  }
  if (m.dim() != im.dim())
    return fail("take_along_dim", "input and indices should have the same number of dimensions, but got " +
                                      std::to_string(m.dim()) + " dimensions for input, and " + std::to_string(im.dim()) +
                                      " dimensions for indices");
  int64_t dim = a.integer("dim");
  if (!wrap("take_along_dim", dim, m.dim(), err)) return err;
  // Broadcast both operands over every dim but `dim`.
  Ints self_sizes = m.sizes;
  if (!self_sizes.empty()) self_sizes[dim] = im.sizes[dim];
  std::string e;
  auto shape = meta::broadcast_shapes(self_sizes, im.sizes, e);
  if (!shape) return fail("take_along_dim", e);
  Ints idx_shape = *shape, self_shape = *shape;
  if (!self_shape.empty()) self_shape[dim] = m.sizes[dim];
  ValueId s = self, i = idx;
  if (self_shape != m.sizes) s = expand_to(call, "take_along_dim", self, self_shape).values.at(0);
  if (idx_shape != im.sizes) i = expand_to(call, "take_along_dim", idx, idx_shape).values.at(0);
  return gather_values(call, "take_along_dim", s, dim, i);
}

}  // namespace fastdyn::codegen
