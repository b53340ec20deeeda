// codegen/capture/capture_subscript.cpp — the binders of `x[idx]` (operator.getitem, Tensor.__getitem__)
// and `x[idx] = v` (operator.setitem, Tensor.__setitem__).
//
// Basic indexing becomes ATen view ops (select, slice, unsqueeze), so results are real views
// exactly where eager returns views; advanced indexing becomes one aten::index.Tensor. Assignment
// writes through the same views in place (fill_, copy_, or index_put_ for advanced indices).
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"
#include "codegen/capture/meta_views.h"
#include "codegen/capture/view_helpers.h"
#include "runtime/errors.h"

#include <algorithm>
#include <numeric>

namespace fastdyn::codegen {

using meta::Ints;
using meta::MetaResult;
using namespace views;

// ---- subscripts: x[idx] ------------------------------------------------------------------------
//
// The index is applied item by item as eager does: ints select (removing the dim), slices slice,
// None and True/False insert a dim, `...` skips the dims the other items do not consume, and
// tensors (or lists of ints) are collected as advanced indices at the dim they stand at. After
// the basic items, one aten::index.Tensor applies all advanced indices at once.

namespace {

// ATen's advanced-indexing geometry: shape from broadcasting the index shapes (placed where the
// indexed dims were when they are adjacent, else first), strides from TensorIterator over the
// restrided source and the reshaped indices. `idx[d]` is the index for dim d or nullptr.
MetaResult advanced_index_meta(const TensorMeta& self, std::vector<const TensorMeta*> idx) {
  const int64_t n = self.dim();
  idx.resize(static_cast<size_t>(n), nullptr);
  std::vector<int64_t> defined;
  Ints shape_b;
  bool first = true;
  for (int64_t d = 0; d < n; ++d) {
    if (!idx[d]) continue;
    defined.push_back(d);
    if (first) {
      shape_b = idx[d]->sizes;
      first = false;
      continue;
    }
    std::string e;
    auto b = meta::broadcast_shapes(shape_b, idx[d]->sizes, e);
    if (!b) return MetaResult::fail("shape mismatch: indexing tensors could not be broadcast together");
    shape_b = *b;
  }
  std::vector<TensorMeta> expanded(static_cast<size_t>(n));
  for (int64_t d : defined) expanded[d] = meta::expand(*idx[d], shape_b).meta;
  const bool adjacent = defined.back() - defined.front() + 1 == static_cast<int64_t>(defined.size());
  TensorMeta src = self;
  std::vector<bool> has(static_cast<size_t>(n), false);
  for (int64_t d : defined) has[d] = true;
  if (!adjacent) {  // indexed dims move to the front, in order
    Ints perm = defined;
    for (int64_t d = 0; d < n; ++d)
      if (!has[d]) perm.push_back(d);
    src = meta::permute(self, perm).meta;
    std::vector<TensorMeta> reordered;
    std::vector<bool> has2;
    for (int64_t d : perm) {
      reordered.push_back(expanded[d]);
      has2.push_back(has[d]);
    }
    expanded = std::move(reordered);
    has = std::move(has2);
  }
  int64_t before = 0;
  while (!has[before]) ++before;
  const int64_t indexed = static_cast<int64_t>(defined.size());
  const int64_t after = n - before - indexed;
  int64_t b_numel = 1;
  for (int64_t s : shape_b) b_numel *= s;
  for (int64_t d = before; d < before + indexed; ++d)
    if (src.sizes[d] == 0 && b_numel != 0) return MetaResult::fail("index is out of bounds for dimension with size 0");
  Ints shape(src.sizes.begin(), src.sizes.begin() + before), st(src.strides.begin(), src.strides.begin() + before);
  shape.insert(shape.end(), shape_b.begin(), shape_b.end());
  st.insert(st.end(), shape_b.size(), 0);
  shape.insert(shape.end(), src.sizes.begin() + before + indexed, src.sizes.end());
  st.insert(st.end(), src.strides.begin() + before + indexed, src.strides.end());
  std::vector<Ints> operands{st};
  for (int64_t d = before; d < before + indexed; ++d) {
    Ints ishape(static_cast<size_t>(before), 1);
    ishape.insert(ishape.end(), shape_b.begin(), shape_b.end());
    ishape.insert(ishape.end(), static_cast<size_t>(after), 1);
    auto vs = meta::view_strides(expanded[d].sizes, expanded[d].strides, ishape);
    TensorMeta im = expanded[d];
    im.sizes = ishape;
    im.strides = vs ? *vs : contiguous_strides(ishape);
    operands.push_back(meta::broadcast_strides(im, shape));
  }
  Ints out_strides = meta::tensor_iterator_strides(shape, operands);
  return {meta::fresh(self, shape, out_strides), {}};
}

// A list of Python ints as a 1-d long tensor built in the graph (one scalar_tensor per entry).
ValueId int_list_tensor(BindCall& call, const Ints& values, c10::Device device) {
  TensorMeta scalar;
  scalar.dtype = c10::ScalarType::Long;
  scalar.device = device;
  std::vector<ValueId> items;
  for (int64_t v : values)
    items.push_back(emit1(call.graph, OpId::scalar_tensor,
                          {Arg::of_int(v), Arg::of_dtype(c10::ScalarType::Long), Arg::none(), Arg::of_device(device),
                           Arg::none()},
                          scalar));
  TensorMeta out = meta::fresh_contiguous(scalar, {static_cast<int64_t>(values.size())});
  if (items.empty())
    return emit1(call.graph, OpId::empty_memory_format,
                 {Arg::of_ints({0}), Arg::of_dtype(c10::ScalarType::Long), Arg::none(), Arg::of_device(device), Arg::none(),
                  Arg::none()},
                 out);
  return emit1(call.graph, OpId::stack, {Arg::of_values(items), Arg::of_int(0)}, out);
}

// The index tensor eager substitutes for a boolean scalar: [0] for True, [] for False.
ValueId bool_index_tensor(BindCall& call, bool value, c10::Device device) {
  TensorMeta scalar;
  scalar.dtype = c10::ScalarType::Long;
  scalar.device = device;
  const int64_t n = value ? 1 : 0;
  return emit1(call.graph, OpId::zeros,
               {Arg::of_ints({n}), Arg::of_dtype(c10::ScalarType::Long), Arg::none(), Arg::of_device(device), Arg::none()},
               meta::fresh_contiguous(scalar, {n}));
}

const char* index_kind_name(const CallArg& a) {
  switch (a.kind) {
    case CallArg::Kind::Double: return "float";
    case CallArg::Kind::String: return "str";
    case CallArg::Kind::DType: return "torch.dtype";
    case CallArg::Kind::Device: return "torch.device";
    case CallArg::Kind::TensorList: return "list of Tensors";
    case CallArg::Kind::Tuple: return "nested sequence";
    default: return "object";
  }
}

}  // namespace

namespace {

// `x[index]` split the way eager applies it: the basic items as a chain of views of x, and the
// advanced indices (per dim of that view, -1 where none) for one index / index_put_ afterwards.
struct Indexed {
  ValueId view = -1;
  bool emitted = false;           // some view node was emitted (else `view` is x itself)
  std::vector<ValueId> advanced;  // empty when the index has no advanced item
};

// Applies `index` to tensor `self` (see the section comment). Boolean masks are advanced indices
// whose result shape depends on their values: only `masks_ok` callers (assignment) take them.
// Returns the failure, naming `op`, where eager would raise or capture cannot follow.
std::optional<CaptureResult> apply_index(BindCall& call, const char* op, ValueId self_value, const CallArg& index,
                                         bool masks_ok, Indexed& out) {
  ValueId cur = self_value;
  const TensorMeta self = call.graph.meta(cur);
  const c10::Device device = self.device;
  // A tuple is a multi-dim index; so is a list of tensors (Python treats such a sequence as a
  // tuple). A list of ints (IntList) is one advanced index.
  std::vector<CallArg> items;
  if (index.kind == CallArg::Kind::Tuple) {
    items = index.items;
  } else if (index.kind == CallArg::Kind::TensorList) {
    for (ValueId v : index.values) items.push_back(CallArg::tensor(v));
  } else {
    items.push_back(index);
  }
  auto is_mask = [&](const CallArg& it) {
    if (it.kind != CallArg::Kind::Tensor) return false;
    c10::ScalarType t = call.graph.meta(it.value).dtype;
    return t == c10::ScalarType::Bool || t == c10::ScalarType::Byte;
  };

  // Pass 1: how many dims the items consume, so that `...` knows how many it stands for.
  int64_t consumed = 0, ellipses = 0;
  for (const CallArg& it : items) {
    switch (it.kind) {
      case CallArg::Kind::Int:
      case CallArg::Kind::Slice:
      case CallArg::Kind::IntList: ++consumed; break;
      case CallArg::Kind::Tensor: {
        const TensorMeta& im = call.graph.meta(it.value);
        if (is_mask(it)) {
          if (!masks_ok)
            return fail(op, "indexing with a boolean mask gives a data-dependent output shape (unknown at trace time)");
          consumed += std::max<int64_t>(im.dim(), 1);
          break;
        }
        if (!is_index_dtype(im.dtype))
          return fail(op, "tensors used as indices must be long, int, byte or bool tensors (got " +
                              std::string(c10::toString(im.dtype)) + ")");
        // NB: eager reads a 0-dim index's value and selects: a view at a data-dependent offset.
        if (im.dim() == 0)
          return fail(op, "a 0-dim integer tensor index selects a view at its value, which is unknown at trace time");
        ++consumed;
        break;
      }
      case CallArg::Kind::None:
      case CallArg::Kind::Bool: break;
      case CallArg::Kind::Ellipsis: ++ellipses; break;
      default:
        return fail(op, std::string("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                                    "are valid indices (got ") + index_kind_name(it) + ")");
    }
  }
  if (ellipses > 1) return fail(op, "an index can only have a single ellipsis ('...')");
  if (consumed > self.dim())
    return fail(op, "too many indices for tensor of dimension " + std::to_string(self.dim()));

  // Pass 2: basic indexing as a chain of views; advanced indices collected by dim.
  std::vector<ValueId>& advanced = out.advanced;
  advanced.clear();
  auto record_advanced = [&](int64_t dim, ValueId v) {
    if (static_cast<int64_t>(advanced.size()) <= dim) advanced.resize(static_cast<size_t>(dim) + 1, -1);
    advanced[dim] = v;
  };
  int64_t dim = 0;
  bool emitted = false;
  for (const CallArg& it : items) {
    switch (it.kind) {
      case CallArg::Kind::Int: {
        MetaResult r = meta::select(call.graph.meta(cur), dim, it.i);
        if (!r.ok()) return fail(op, r.error);
        cur = emit1(call.graph, OpId::select_int, {Arg::of_value(cur), Arg::of_int(dim), Arg::of_int(it.i)},
                    r.meta);
        emitted = true;
        break;
      }
      case CallArg::Kind::Slice: {
        const int64_t step = it.slice_step.value_or(1);
        if (step == 0) return fail(op, "slice step cannot be zero");
        if (step < 0) return fail(op, "step must be greater than zero");
        // `:` keeps the whole dim: eager's slice there is a no-op view, so skip the node (an
        // index of only such slices still gets its alias below).
        // NB: a stop past a symbolic size is not "the whole dim" at every size: the node stays.
        const TensorMeta& cm = call.graph.meta(cur);
        const bool static_dim = !cm.symbolic() || cm.sym_sizes[static_cast<size_t>(dim)].is_constant();
        const bool whole = step == 1 && it.slice_start.value_or(0) == 0 &&
                           (!it.slice_stop || (static_dim && *it.slice_stop >= cm.sizes[static_cast<size_t>(dim)]));
        if (!whole) {
          cur = emit_slice(call, cur, dim, it.slice_start, it.slice_stop, step);
          emitted = true;
        }
        ++dim;
        break;
      }
      case CallArg::Kind::None:
        cur = emit_unsqueeze(call, cur, dim);
        emitted = true;
        ++dim;
        break;
      case CallArg::Kind::Bool:
        cur = emit_unsqueeze(call, cur, dim);
        record_advanced(dim, bool_index_tensor(call, it.b, device));
        emitted = true;
        ++dim;
        break;
      case CallArg::Kind::Ellipsis: dim += self.dim() - consumed; break;
      case CallArg::Kind::Tensor: {
        // A k-dim mask stands for k dims; they must match the dims it covers.
        const TensorMeta& im = call.graph.meta(it.value);
        const int64_t k = is_mask(it) ? std::max<int64_t>(im.dim(), 1) : 1;
        if (is_mask(it))
          for (int64_t j = 0; j < im.dim(); ++j)
            if (im.sizes[j] != call.graph.meta(cur).sizes[dim + j])
              return fail(op, "the shape of the mask " + meta::format_ints(im.sizes) + " at index " +
                                  std::to_string(j) + " does not match the shape of the indexed tensor " +
                                  meta::format_ints(call.graph.meta(cur).sizes) + " at index " + std::to_string(dim + j));
        record_advanced(dim, it.value);
        dim += k;
        break;
      }
      case CallArg::Kind::IntList:
        record_advanced(dim, int_list_tensor(call, it.ints, device));
        ++dim;
        break;
      default: break;  // rejected in pass 1
    }
  }
  out.view = cur;
  out.emitted = emitted;
  return std::nullopt;
}

}  // namespace

CaptureResult bind_getitem(BindCall& call) {
  static const char* op = "getitem";
  if (call.args.size() != 2 || !call.kwargs.empty() || call.args[0].kind != CallArg::Kind::Tensor)
    return fail(op, "expects a tensor and one index");
  Indexed ix;
  if (auto err = apply_index(call, op, call.args[0].value, call.args[1], /*masks_ok=*/false, ix)) return *err;
  ValueId cur = ix.view;
  if (!ix.advanced.empty()) {
    std::vector<const TensorMeta*> metas;
    for (ValueId v : ix.advanced) metas.push_back(v < 0 ? nullptr : &call.graph.meta(v));
    MetaResult r = advanced_index_meta(call.graph.meta(cur), metas);
    if (!r.ok()) return fail(op, r.error);
    TensorMeta out = derived(call, r.meta, {cur});
    return tensor_result(emit1(call.graph, OpId::index_Tensor, {Arg::of_value(cur), Arg::of_values(ix.advanced)}, out));
  }
  if (!ix.emitted)  // x[...], x[()]: eager returns a fresh alias of x
    cur = emit1(call.graph, OpId::alias, {Arg::of_value(cur)}, call.graph.meta(cur));
  return tensor_result(cur);
}

// ---- assignment: x[idx] = value ------------------------------------------------------------------
//
// As eager's Tensor.__setitem__: a Python number becomes a 0-dim tensor of x's dtype; `x[False] =
// v` does nothing; the basic items give a view of x; without advanced items the value is written
// into that view (fill_ for a number, else copy_ of the value with its leading size-1 dims
// dropped, broadcast to the view), with them one index_put_ (accumulate=False) on the view,
// which needs the value in x's dtype. Every write is in place, into the caller's tensor.
// The call returns None (a none_result). Boolean masks are accepted here with a number
// or 0-dim value only: another value's required shape depends on how many mask elements are set.

CaptureResult bind_setitem(BindCall& call) {
  static const char* op = "setitem";
  if (call.args.size() != 3 || !call.kwargs.empty() || call.args[0].kind != CallArg::Kind::Tensor)
    return fail(op, "expects a tensor, one index and a value");
  const ValueId self = call.args[0].value;
  const CallArg& index = call.args[1];
  const CallArg& value = call.args[2];
  const TensorMeta self_meta = call.graph.meta(self);
  const bool number = value.kind == CallArg::Kind::Int || value.kind == CallArg::Kind::Double ||
                      value.kind == CallArg::Kind::Bool;
  if (!number && value.kind != CallArg::Kind::Tensor)
    return fail(op, std::string("can't assign a ") + index_kind_name(value) + " to a " +
                        c10::toString(self_meta.dtype) + " tensor");
  // NB: a copy, not a pointer into the graph: emitting nodes below may move its values.
  const std::optional<TensorMeta> vm =
      number ? std::nullopt : std::optional<TensorMeta>(call.graph.meta(value.value));
  if (index.kind == CallArg::Kind::Bool && !index.b) return none_result();
  // NB: writing into a tensor that autograd records, or writing a value that requires grad,
  // changes requires_grad/grad_fn of x (or raises for a leaf); eager handles those.
  if (call.ctx.grad_enabled && (self_meta.requires_grad || (vm && vm->requires_grad)))
    return fail(op, "in-place assignment recorded by autograd is not supported");
  Indexed ix;
  if (auto err = apply_index(call, op, self, index, /*masks_ok=*/true, ix)) return *err;
  const TensorMeta dst = call.graph.meta(ix.view);
  // The value with its leading size-1 dims dropped, as eager views it before writing.
  ValueId src = -1;
  Ints src_sizes;
  if (!number) {
    src = value.value;
    src_sizes = vm->sizes;
    size_t lead = 0;
    while (lead < src_sizes.size() && src_sizes[lead] == 1) ++lead;
    if (lead > 0) {
      src_sizes.erase(src_sizes.begin(), src_sizes.begin() + static_cast<std::ptrdiff_t>(lead));
      MetaResult r = meta::view(*vm, src_sizes);
      if (!r.ok()) return fail(op, r.error);
      src = emit1(call.graph, OpId::view, {Arg::of_value(src), Arg::of_ints(src_sizes)}, r.meta);
    }
  }
  // `from` expands to `to`: no more dims, each trailing dim equal or 1.
  auto expands_to = [](const Ints& from, const Ints& to) {
    if (from.size() > to.size()) return false;
    for (size_t i = 1; i <= from.size(); ++i)
      if (from[from.size() - i] != 1 && from[from.size() - i] != to[to.size() - i]) return false;
    return true;
  };
  if (ix.advanced.empty()) {
    // NB: fill_ and copy_ refuse a destination whose elements share memory; index_put_ does not.
    for (size_t i = 0; i < dst.sizes.size(); ++i)
      if (dst.strides[i] == 0 && dst.sizes[i] > 1)
        return fail(op, "unsupported operation: more than one element of the written-to tensor refers to a single "
                        "memory location");
    if (number) {
      emit1(call.graph, OpId::fill__Scalar, {Arg::of_value(ix.view), scalar_arg(value)}, dst);
      return none_result();
    }
    if (!expands_to(src_sizes, dst.sizes))
      return fail(op, "shape mismatch: value tensor of shape " + meta::format_ints(vm->sizes) +
                          " cannot be broadcast to indexing result of shape " + meta::format_ints(dst.sizes));
    // As eager's copy_to: a 0-dim CPU value into a view of another shape is fill_(value), which
    // reads the value once (it may be an element of x itself: x[:, 0] = x[0, 0]); copy_ of the
    // expanded value would refuse the overlap.
    if (vm->dim() == 0 && vm->device.is_cpu() && vm->sizes != dst.sizes) {
      emit1(call.graph, OpId::fill__Tensor, {Arg::of_value(ix.view), Arg::of_value(value.value)}, dst);
      return none_result();
    }
    emit1(call.graph, OpId::copy_, {Arg::of_value(ix.view), Arg::of_value(src), Arg::of_bool(false)}, dst);
    return none_result();
  }
  bool masked = false;
  for (ValueId v : ix.advanced)
    masked = masked || (v >= 0 && (call.graph.meta(v).dtype == c10::ScalarType::Bool ||
                                   call.graph.meta(v).dtype == c10::ScalarType::Byte));
  if (number) {
    TensorMeta scalar = meta::fresh_contiguous(dst, {});
    scalar.requires_grad = false;
    src = emit1(call.graph, OpId::scalar_tensor,
                {scalar_arg(value), Arg::of_dtype(dst.dtype), Arg::none(), Arg::of_device(dst.device), Arg::none()},
                scalar);
  } else if (vm->dtype != dst.dtype) {
    return fail(op, std::string("Index put requires the source and destination dtypes match, got ") +
                        c10::toString(dst.dtype) + " for the destination and " + c10::toString(vm->dtype) +
                        " for the source.");
  } else if (masked && !src_sizes.empty()) {
    return fail(op, "assigning a non-scalar value through a boolean mask: the value's required shape depends on "
                    "how many mask elements are set (unknown at trace time)");
  }
  if (!masked) {
    std::vector<const TensorMeta*> metas;
    for (ValueId v : ix.advanced) metas.push_back(v < 0 ? nullptr : &call.graph.meta(v));
    MetaResult r = advanced_index_meta(dst, metas);
    if (!r.ok()) return fail(op, r.error);
    if (!expands_to(src_sizes, r.meta.sizes))
      return fail(op, "shape mismatch: value tensor of shape " + meta::format_ints(src_sizes) +
                          " cannot be broadcast to indexing result of shape " + meta::format_ints(r.meta.sizes));
  }
  emit1(call.graph, OpId::index_put_,
        {Arg::of_value(ix.view), Arg::of_values(ix.advanced), Arg::of_value(src), Arg::of_bool(false)}, dst);
  return none_result();
}

}  // namespace fastdyn::codegen
