// codegen/capture/meta_views.h — layout rules: the sizes, strides and storage offsets that ATen gives
// the outputs of view ops (permute, expand, select, slice, view...), of layout-preserving
// copies (clone, empty_like, _to_copy, cat) and of TensorIterator-allocated outputs.
//
// Layer: codegen/, pure C++ over TensorMeta; never runs ATen. Every rule reproduces eager's
// result exactly — including the strides of size-0/1 dimensions, which guards compare — and
// tests/cpp/capture/test_capture_views.cpp checks each one against real ATen tensors.
// Rules that can reject their input return a MetaResult whose `error` holds ATen-style text
// without the op name; the binders (capture_views.cpp) prefix it with the op that failed.
#pragma once
#include "codegen/graph/graph.h"
#include "codegen/capture/meta_rules.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fastdyn::codegen::meta {

using Ints = std::vector<int64_t>;

struct MetaResult {
  TensorMeta meta;
  std::string error;  // empty on success
  bool ok() const { return error.empty(); }
  static MetaResult fail(std::string why) { MetaResult r; r.error = std::move(why); return r; }
};

// "[2, 3]" — the way ATen prints a size list in its messages.
std::string format_ints(const Ints& v);

// Wraps a possibly negative dim into [0, ndim). A 0-dim tensor accepts -1 and 0 (as ATen does).
// On failure returns nullopt and sets `error` to ATen's "Dimension out of range" text.
std::optional<int64_t> wrap_dim(int64_t dim, int64_t ndim, std::string& error);

// ---- layouts ----------------------------------------------------------------------------
// NB: contiguous_strides, is_contiguous, is_non_overlapping_and_dense and preserve_format_strides
// (empty_like / clone with preserve_format) live in codegen/capture/meta_rules.h; the rules here build
// on them.
// NHWC (4-d) / NDHWC (5-d) strides for NCHW / NCDHW sizes.
Ints channels_last_strides(const Ints& sizes);
enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, ChannelsLast3d };
// Tensor::suggest_memory_format: channels-last when the strides look like it (4-d/5-d only).
MemoryFormat suggest_memory_format(const TensorMeta& m);
Ints strides_for_format(const Ints& sizes, MemoryFormat f);
// _to_copy (Tensor.to, .float(), ...) with preserve_format: the same rule as empty_like.
Ints to_copy_strides(const TensorMeta& m);
// The strides TensorIterator gives a freshly allocated output of `shape`, from the strides of
// its inputs already broadcast to `shape` (0 in broadcast dims). Inputs are listed in operand
// order; their order breaks ties exactly as ATen's does.
Ints tensor_iterator_strides(const Ints& shape, const std::vector<Ints>& input_strides);
// Strides of `m` broadcast to `shape` (trailing alignment, 0 where a dim is broadcast).
Ints broadcast_strides(const TensorMeta& m, const Ints& shape);
// Broadcast of two shapes; nullopt (and `error`) when they do not broadcast.
std::optional<Ints> broadcast_shapes(const Ints& a, const Ints& b, std::string& error);

// ---- shape inference ----------------------------------------------------------------------
// Resolves one -1 entry of `shape` against `numel` (view/reshape). Errors name the shape:
// "shape '[5, 3]' is invalid for input of size 16".
std::optional<Ints> infer_size(const Ints& shape, int64_t numel, std::string& error);
// The strides a view of (sizes, strides) with `new_sizes` must have, or nullopt when the view
// would span two non-contiguous chunks (then reshape copies).
std::optional<Ints> view_strides(const Ints& sizes, const Ints& strides, const Ints& new_sizes);

// ---- view rules (output shares storage with the input) ------------------------------------
// All take dims already wrapped unless noted; they keep dtype, device and requires_grad.
MetaResult view(const TensorMeta& m, const Ints& shape);      // shape may hold one -1
// x.view(dtype): the bytes reinterpreted; a width change rescales the last dim and the strides.
MetaResult view_dtype(const TensorMeta& m, c10::ScalarType to);
MetaResult permute(const TensorMeta& m, const Ints& dims);    // dims may be negative
TensorMeta transpose(const TensorMeta& m, int64_t d0, int64_t d1);
MetaResult expand(const TensorMeta& m, const Ints& sizes);    // sizes may hold -1
TensorMeta squeeze(const TensorMeta& m, const Ints& dims);    // only size-1 dims among `dims` go
TensorMeta unsqueeze(const TensorMeta& m, int64_t dim);       // dim in [0, ndim]
MetaResult select(const TensorMeta& m, int64_t dim, int64_t index);  // index may be negative
// Clamps start/end as ATen's slice does (negative wrap, then clamp to [0, size]); step > 0.
TensorMeta slice(const TensorMeta& m, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                 int64_t step);
MetaResult narrow(const TensorMeta& m, int64_t dim, int64_t start, int64_t length);
TensorMeta diagonal(const TensorMeta& m, int64_t offset, int64_t d1, int64_t d2);
MetaResult unfold(const TensorMeta& m, int64_t dim, int64_t size, int64_t step);
// split(split_size) / split_with_sizes: one view per piece of the given lengths.
std::vector<TensorMeta> split_sizes_views(const TensorMeta& m, int64_t dim, const Ints& sizes);
// tensor_split(indices): the pieces between consecutive split points, clamped as slice does.
std::vector<TensorMeta> split_points_views(const TensorMeta& m, int64_t dim, const Ints& points);

// ---- copies -------------------------------------------------------------------------------
// A fresh tensor of `sizes` with `strides` (other fields from `like`).
TensorMeta fresh(const TensorMeta& like, Ints sizes, Ints strides);
TensorMeta fresh_contiguous(const TensorMeta& like, Ints sizes);

}  // namespace fastdyn::codegen::meta
