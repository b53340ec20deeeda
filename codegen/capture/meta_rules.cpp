// codegen/capture/meta_rules.cpp — see meta_rules.h. The layout rules follow TensorIterator's algorithm
// as observed on eager ATen (and checked by the tests): same-shaped inputs that are all
// contiguous / all channels-last / all dense with equal strides get that layout directly; other
// cases sort the dimensions by the inputs' strides (first input that decides wins, ties broken
// by size, broadcast dims ignored) and lay the output out densely in that order.
#include "runtime/format.h"
#include "codegen/capture/meta_rules.h"

#include "runtime/errors.h"

#include <algorithm>
#include <numeric>

namespace fastdyn::codegen {

// ---- strides and layouts ----------------------------------------------------------------------

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return s;
}

std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes) {
  FD_CHECK(sizes.size() == 4, "channels_last_strides needs 4-d sizes");
  std::vector<int64_t> s(4);
  s[1] = 1;
  s[3] = std::max<int64_t>(sizes[1], 1);
  s[2] = s[3] * std::max<int64_t>(sizes[3], 1);
  s[0] = s[2] * std::max<int64_t>(sizes[2], 1);
  return s;
}

bool is_contiguous(const TensorMeta& m) {
  if (m.numel() == 0) return true;
  int64_t expected = 1;
  for (size_t i = m.sizes.size(); i-- > 0;) {
    if (m.sizes[i] == 1) continue;
    if (m.strides[i] != expected) return false;
    expected *= m.sizes[i];
  }
  return true;
}

bool is_channels_last_contiguous(const TensorMeta& m) {
  if (m.sizes.size() != 4) return false;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (m.sizes[d] == 1) continue;
    if (m.strides[d] != expected) return false;
    expected *= m.sizes[d];
  }
  return true;
}

bool is_non_overlapping_and_dense(const TensorMeta& m) {
  const size_t n = m.sizes.size();
  if (n == 1) return m.sizes[0] < 2 || m.strides[0] == 1;
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (m.sizes[a] < 2) return false;
    if (m.sizes[b] < 2) return true;
    return m.strides[a] < m.strides[b];
  });
  int64_t required = 1;
  for (size_t i = 0; i < n; ++i) {
    int64_t size = m.sizes[perm[i]];
    if (size < 2) return true;
    if (m.strides[perm[i]] != required) return false;
    required *= size;
  }
  return true;
}

namespace {

// Tensor::suggest_memory_format for 4-d strided tensors: channels-last when the strides rank
// C innermost and N outermost (size-1 dims ignored), as ATen's is_channels_last_strides_2d does.
bool looks_channels_last(const TensorMeta& m) {
  if (m.sizes.size() != 4 || is_contiguous(m)) return false;
  int64_t min = 0;
  if (m.strides[1] == 0) return false;
  for (int d : {1, 3, 2, 0}) {
    if (m.sizes[d] == 0) return false;
    if (m.strides[d] < min) return false;
    // NB: N (d=0) with size 1 may sit anywhere; ATen's rule lets it pass.
    if (d == 0 && min == m.strides[1]) return false;
    min = m.strides[d];
    if (m.sizes[d] > 1) min *= m.sizes[d];
  }
  return true;
}

// Dense strides keeping the dimension order of `strides` (stride-sorted by insertion, zero strides
// ambiguous, equal strides ordered by size), as empty_like(preserve_format) lays out non-dense inputs.
std::vector<int64_t> dense_in_order(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  const size_t n = sizes.size();
  std::vector<int64_t> perm(n);
  std::iota(perm.rbegin(), perm.rend(), 0);  // innermost first
  auto should_swap = [&](int64_t a, int64_t b) {
    // A zero stride (broadcast dim) is ambiguous: keep the contiguous order.
    if (strides[a] == 0 || strides[b] == 0) return 0;
    if (strides[a] < strides[b]) return -1;
    if (strides[a] > strides[b]) return 1;
    return sizes[a] > sizes[b] ? 1 : 0;
  };
  sort_dims_fastest_first(perm, should_swap);
  std::vector<int64_t> out(n);
  int64_t acc = 1;
  for (size_t i = 0; i < n; ++i) {
    out[perm[i]] = acc;
    acc *= std::max<int64_t>(sizes[perm[i]], 1);
  }
  return out;
}

}  // namespace

std::vector<int64_t> preserve_format_strides(const TensorMeta& m) {
  if (is_non_overlapping_and_dense(m)) return m.strides;
  return dense_in_order(m.sizes, m.strides);
}

std::vector<int64_t> suggested_format_strides(const TensorMeta& m, const std::vector<int64_t>& sizes) {
  if (sizes.size() == 4 && looks_channels_last(m)) return channels_last_strides(sizes);
  return contiguous_strides(sizes);
}

std::vector<int64_t> tensor_iterator_strides(const std::vector<int64_t>& shape,
                                             const std::vector<const TensorMeta*>& operands) {
  const size_t n = shape.size();
  // Fast setup: every operand of the same shape (a zero-dim operand among dimensioned ones
  // breaks it), and all contiguous / all channels-last / all dense with identical strides.
  bool same_shape = true, has_scalars = false, has_tensors = false;
  for (const TensorMeta* op : operands) {
    (op->sizes.empty() ? has_scalars : has_tensors) = true;
    if (op->sizes != operands.front()->sizes) same_shape = false;
  }
  if (has_scalars && has_tensors) same_shape = false;
  if (same_shape && !operands.empty()) {
    bool contiguous = true, channels_last = true, dense = true;
    for (const TensorMeta* op : operands) {
      contiguous &= is_contiguous(*op);
      channels_last &= is_channels_last_contiguous(*op);
      dense &= is_non_overlapping_and_dense(*op);
    }
    if (contiguous) return contiguous_strides(shape);
    if (channels_last) return channels_last_strides(shape);
    if (dense) {
      bool equal = true;
      for (const TensorMeta* op : operands) equal &= op->strides == operands.front()->strides;
      if (equal) return operands.front()->strides;
    }
  }
  // Slow path: each operand's strides broadcast to `shape` (0 where broadcast).
  std::vector<std::vector<int64_t>> st;
  for (const TensorMeta* op : operands) {
    std::vector<int64_t> s(n, 0);
    size_t off = n - op->sizes.size();
    for (size_t i = 0; i < op->sizes.size(); ++i)
      s[off + i] = (op->sizes[i] == 1 && shape[off + i] != 1) ? 0 : op->strides[i];
    st.push_back(std::move(s));
  }
  std::vector<int64_t> perm(n);
  std::iota(perm.rbegin(), perm.rend(), 0);  // perm[0] is the innermost dim
  auto should_swap = [&](int64_t d0, int64_t d1) {
    for (const auto& s : st) {
      int64_t s0 = s[d0], s1 = s[d1];
      if (s0 == 0 || s1 == 0) continue;
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (shape[d0] > shape[d1]) return 1;
    }
    return 0;
  };
  sort_dims_fastest_first(perm, should_swap);
  bool inverted = true;
  for (size_t j = 0; j < n; ++j) inverted &= perm[j] == static_cast<int64_t>(n - j - 1);
  if (inverted) return contiguous_strides(shape);
  // NB: unlike contiguous_strides, TensorIterator multiplies by the raw size, so a size-0 dim
  // zeroes the strides outside it.
  std::vector<int64_t> out(n);
  int64_t acc = 1;
  for (size_t i = 0; i < n; ++i) {
    out[perm[i]] = acc;
    acc *= shape[perm[i]];
  }
  return out;
}

// ---- shapes -----------------------------------------------------------------------------------

std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<std::vector<int64_t>>& shapes) {
  size_t n = 0;
  for (const auto& s : shapes) n = std::max(n, s.size());
  std::vector<int64_t> out(n, 1);
  for (const auto& s : shapes) {
    size_t off = n - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[off + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o != 1) return std::nullopt;
      o = s[i];
    }
  }
  return out;
}

std::optional<int64_t> wrap_dim(int64_t dim, int64_t ndim) {
  int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n) return std::nullopt;
  return dim < 0 ? dim + n : dim;
}

std::string shape_str(const std::vector<int64_t>& v) { return int_list_str(v); }

std::vector<int64_t> reduced_shape(const std::vector<int64_t>& sizes, const std::vector<bool>& reduce, bool keepdim) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!reduce[i]) out.push_back(sizes[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

std::optional<std::string> reduction_mask(const char* op, const std::vector<int64_t>& dims, int64_t ndim,
                                          std::vector<bool>& mask) {
  mask.assign(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    auto w = wrap_dim(d, ndim);
    if (!w)
      return std::string(op) + ": dim " + std::to_string(d) + " out of range for a " + std::to_string(ndim) +
             "-d tensor";
    if (ndim == 0) continue;
    if (mask[static_cast<size_t>(*w)])
      return std::string(op) + ": dim " + std::to_string(*w) + " appears multiple times in the list of dims";
    mask[static_cast<size_t>(*w)] = true;
  }
  return std::nullopt;
}

// ---- dtypes -----------------------------------------------------------------------------------

bool is_integral(c10::ScalarType t, bool include_bool) { return c10::isIntegralType(t, include_bool); }
bool is_floating(c10::ScalarType t) { return c10::isFloatingType(t); }
bool can_cast(c10::ScalarType from, c10::ScalarType to) { return c10::canCast(from, to); }
std::string dtype_name(c10::ScalarType t) { return c10::toString(t); }

std::optional<std::string> result_dtype(OpId op, const std::string& name, c10::ScalarType common,
                                        std::optional<c10::ScalarType> requested, c10::ScalarType default_dtype,
                                        c10::ScalarType& out) {
  using ST = c10::ScalarType;
  auto not_implemented = [&](ST t) { return name + ": not implemented for '" + dtype_name(t) + "'"; };
  out = common;
  switch (op_info(op).dtype) {
    case DtypeRule::Promote: return std::nullopt;
    case DtypeRule::IntToFloat:
      if (is_integral(common, true)) out = default_dtype;
      return std::nullopt;
    case DtypeRule::ToBool: out = ST::Bool; return std::nullopt;
    case DtypeRule::NoBool:
      if (common == ST::Bool) return name + ": not supported for bool tensors";
      return std::nullopt;
    case DtypeRule::FloatOnly:
      if (requested) out = *requested;
      if (!is_floating(out)) return not_implemented(out);
      return std::nullopt;
    case DtypeRule::Integral:
      if (!is_integral(common, true)) return not_implemented(common);
      return std::nullopt;
    case DtypeRule::IntNoBool:
      if (!is_integral(common, false)) return not_implemented(common);
      return std::nullopt;
    case DtypeRule::BoolToLong:
      if (common == ST::Bool) out = ST::Long;
      return std::nullopt;
    case DtypeRule::IntToLong:
      out = requested ? *requested : is_integral(common, true) ? ST::Long : common;
      return std::nullopt;
    case DtypeRule::FloatOut:
      if (requested) out = *requested;
      if (!is_floating(out))
        return name + ": could not infer output dtype; input dtype must be floating point, got " + dtype_name(out);
      return std::nullopt;
    case DtypeRule::AllAny: out = common == ST::Byte ? ST::Byte : ST::Bool; return std::nullopt;
    case DtypeRule::ToLong: out = ST::Long; return std::nullopt;
    case DtypeRule::ArgIndex:
      if (common == ST::Bool) return name + "(): does not support bool input";
      out = ST::Long;
      return std::nullopt;
    case DtypeRule::Own: break;
  }
  FD_CHECK(false, std::string("result_dtype: ") + op_info(op).id + "'s dtype is its binder's own (ops.def Dtype Own)");
  return std::nullopt;
}

namespace {
using ST = c10::ScalarType;
ST promote_skip_undefined(ST a, ST b) {
  if (a == ST::Undefined) return b;
  if (b == ST::Undefined) return a;
  return c10::promoteTypes(a, b);
}
// The higher priority class wins unless the lower one is of a higher category (bool < int < float).
ST combine_categories(ST higher, ST lower) {
  if (c10::isComplexType(higher)) return higher;
  if (c10::isComplexType(lower)) return c10::isFloatingType(higher) ? c10::toComplexType(higher) : lower;
  if (c10::isFloatingType(higher)) return higher;
  if (higher == ST::Bool || c10::isFloatingType(lower)) return promote_skip_undefined(higher, lower);
  if (higher != ST::Undefined) return higher;
  return lower;
}
}  // namespace

c10::ScalarType result_type(const std::vector<DtypeOperand>& ops, c10::ScalarType default_dtype) {
  ST dim = ST::Undefined, zero = ST::Undefined, wrapped = ST::Undefined;
  for (const auto& o : ops) {
    ST cur = o.dtype;
    if (o.wrapped) {
      if (c10::isFloatingType(cur)) cur = default_dtype;
      else if (c10::isComplexType(cur)) cur = c10::toComplexType(default_dtype);
      wrapped = promote_skip_undefined(wrapped, cur);
    } else if (o.zero_dim) {
      zero = promote_skip_undefined(zero, cur);
    } else {
      dim = promote_skip_undefined(dim, cur);
    }
  }
  return combine_categories(dim, combine_categories(zero, wrapped));
}

c10::ScalarType scalar_dtype(const CallArg& a) {
  switch (a.kind) {
    case CallArg::Kind::Int: return ST::Long;
    case CallArg::Kind::Double: return ST::Double;
    case CallArg::Kind::Bool: return ST::Bool;
    default: break;
  }
  FD_CHECK(false, "scalar_dtype of a non-number");
  return ST::Undefined;
}

// ---- metas ------------------------------------------------------------------------------------

bool any_requires_grad(const Graph& g, const CaptureContext& ctx, const std::vector<ValueId>& inputs) {
  if (!ctx.grad_enabled) return false;
  for (ValueId v : inputs)
    if (v >= 0 && g.meta(v).requires_grad) return true;
  return false;
}

TensorMeta make_meta(c10::ScalarType dtype, c10::Device device, std::vector<int64_t> sizes,
                     std::vector<int64_t> strides, bool requires_grad) {
  TensorMeta m;
  m.dtype = dtype;
  m.device = device;
  m.sizes = std::move(sizes);
  m.strides = std::move(strides);
  // Autograd tracks floating and complex results only (comparisons, argmax... never require grad).
  m.requires_grad = requires_grad && (c10::isFloatingType(dtype) || c10::isComplexType(dtype));
  return m;
}

TensorMeta contiguous_meta(c10::ScalarType dtype, c10::Device device, std::vector<int64_t> sizes,
                           bool requires_grad) {
  auto strides = contiguous_strides(sizes);
  return make_meta(dtype, device, std::move(sizes), std::move(strides), requires_grad);
}

Arg scalar_arg(const CallArg& a) {
  switch (a.kind) {
    case CallArg::Kind::Int: {
      Arg out = Arg::of_int(a.i);
      // A size-derived int (x + x.shape[1]) keeps its expression: specialize() gives the node each
      // call's value. Only families whose binders pass the number through take one
      // (shapes::takes_symbolic_ints); the others see it pinned, with sym empty.
      if (a.sym.size() == 1 && !a.sym[0].is_constant()) out.sym_ints = a.sym;
      return out;
    }
    case CallArg::Kind::Double: return Arg::of_double(a.d);
    case CallArg::Kind::Bool: return Arg::of_bool(a.b);
    default: break;
  }
  FD_CHECK(false, "scalar_arg of a non-number");
  return Arg::none();
}

Arg const_arg(const CallArg& a) {
  switch (a.kind) {
    case CallArg::Kind::Tensor: return Arg::of_value(a.value);
    case CallArg::Kind::TensorList: return Arg::of_values(a.values);
    case CallArg::Kind::Int: return Arg::of_int(a.i);
    case CallArg::Kind::Double: return Arg::of_double(a.d);
    case CallArg::Kind::Bool: return Arg::of_bool(a.b);
    case CallArg::Kind::None: return Arg::none();
    case CallArg::Kind::IntList: return Arg::of_ints(a.ints);
    case CallArg::Kind::DType: return Arg::of_dtype(a.dtype);
    case CallArg::Kind::Device: return Arg::of_device(a.device);
    case CallArg::Kind::String: return Arg::of_string(a.str);
    case CallArg::Kind::MemoryFormat: return Arg::of_int(a.i);
    default: break;
  }
  FD_CHECK(false, "const_arg of an unsupported kind");
  return Arg::none();
}

}  // namespace fastdyn::codegen
