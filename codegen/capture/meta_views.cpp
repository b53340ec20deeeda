// codegen/capture/meta_views.cpp — see meta_views.h. Each rule mirrors the geometry ATen computes for
// the op, written from its documented behaviour and checked against eager in the tests.
#include "runtime/format.h"
#include "codegen/capture/meta_views.h"

#include <algorithm>
#include <numeric>

namespace fastdyn::codegen::meta {

std::string format_ints(const Ints& v) { return int_list_str(v); }

std::optional<int64_t> wrap_dim(int64_t dim, int64_t ndim, std::string& error) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-dim tensor takes dims -1 and 0
  if (dim < -n || dim >= n) {
    error = "Dimension out of range (expected to be in range of [" + std::to_string(-n) + ", " +
            std::to_string(n - 1) + "], but got " + std::to_string(dim) + ")";
    return std::nullopt;
  }
  return dim < 0 ? dim + n : dim;
}

// ---- layouts ------------------------------------------------------------------------------

namespace {
// Dimension order (fastest first) of NHWC and NDHWC.
const Ints kChannelsLast2dOrder = {1, 3, 2, 0};
const Ints kChannelsLast3dOrder = {1, 4, 3, 2, 0};

const Ints* channels_last_order(size_t ndim) {
  if (ndim == 4) return &kChannelsLast2dOrder;
  if (ndim == 5) return &kChannelsLast3dOrder;
  return nullptr;
}

// Strides dense in the order `fastest_first` (dims listed fastest first); sizes 0/1 count as 1.
Ints strides_in_order(const Ints& sizes, const Ints& fastest_first) {
  Ints st(sizes.size());
  int64_t running = 1;
  for (int64_t d : fastest_first) {
    st[d] = running;
    running *= std::max<int64_t>(sizes[d], 1);
  }
  return st;
}

// ATen's heuristic "do these strides look channels-last": strides non-decreasing along the
// NHWC order, size-1 ambiguities resolved towards the contiguous format.
bool strides_like_channels_last(const TensorMeta& m) {
  const Ints* order = channels_last_order(m.sizes.size());
  if (!order || m.strides[1] == 0) return false;
  int64_t min = 0;
  for (int64_t d : *order) {
    if (m.sizes[d] == 0 || m.strides[d] < min) return false;
    if (d == 0 && min == m.strides[1]) return false;  // N111-like: call it contiguous
    min = m.strides[d];
    if (m.sizes[d] > 1) min *= m.sizes[d];
  }
  return true;
}


Ints reversed_iota(size_t n) {
  Ints perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = static_cast<int64_t>(n - 1 - i);
  return perm;
}
}  // namespace

Ints channels_last_strides(const Ints& sizes) {
  const Ints* order = channels_last_order(sizes.size());
  return order ? strides_in_order(sizes, *order) : contiguous_strides(sizes);
}

MemoryFormat suggest_memory_format(const TensorMeta& m) {
  if (!strides_like_channels_last(m)) return MemoryFormat::Contiguous;
  return m.sizes.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d;
}

Ints strides_for_format(const Ints& sizes, MemoryFormat f) {
  return f == MemoryFormat::Contiguous ? contiguous_strides(sizes) : channels_last_strides(sizes);
}

Ints to_copy_strides(const TensorMeta& m) { return preserve_format_strides(m); }

Ints tensor_iterator_strides(const Ints& shape, const std::vector<Ints>& input_strides) {
  const size_t n = shape.size();
  Ints perm = reversed_iota(n);
  if (n > 1) {
    sort_dims_fastest_first(perm, [&](int64_t a, int64_t b) {
      for (const Ints& st : input_strides) {
        if (st[a] == 0 || st[b] == 0) continue;  // broadcast in one of them: ask the next input
        if (st[a] != st[b]) return st[a] < st[b] ? -1 : 1;
        if (shape[a] > shape[b]) return 1;  // equal strides: the smaller dim goes first
      }
      return 0;
    });
  }
  if (perm == reversed_iota(n)) return contiguous_strides(shape);
  // NB: unlike contiguous_strides, a size-0 dim zeroes the strides outside it, as in ATen.
  Ints out(n);
  int64_t running = 1;
  for (int64_t d : perm) {
    out[d] = running;
    running *= shape[d];
  }
  return out;
}

Ints broadcast_strides(const TensorMeta& m, const Ints& shape) {
  Ints out(shape.size(), 0);
  const size_t offset = shape.size() - m.sizes.size();
  for (size_t i = 0; i < m.sizes.size(); ++i)
    out[offset + i] = (m.sizes[i] == 1 && shape[offset + i] != 1) ? 0 : m.strides[i];
  return out;
}

std::optional<Ints> broadcast_shapes(const Ints& a, const Ints& b, std::string& error) {
  const size_t n = std::max(a.size(), b.size());
  Ints out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      error = "shape mismatch: " + format_ints(a) + " and " + format_ints(b) + " cannot be broadcast together";
      return std::nullopt;
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- shape inference ----------------------------------------------------------------------

std::optional<Ints> infer_size(const Ints& shape, int64_t numel, std::string& error) {
  std::optional<size_t> inferred;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred) {
        error = "only one dimension can be inferred";
        return std::nullopt;
      }
      inferred = i;
    } else if (shape[i] >= 0) {
      known *= shape[i];
    } else {
      error = "invalid shape dimension " + std::to_string(shape[i]);
      return std::nullopt;
    }
  }
  Ints out = shape;
  if (numel == known && !inferred) return out;
  if (inferred && known > 0 && numel % known == 0) {
    out[*inferred] = numel / known;
    return out;
  }
  if (inferred && known == 0 && numel == 0) {
    error = "cannot reshape tensor of 0 elements into shape " + format_ints(shape) +
            " because the unspecified dimension size -1 can be any value and is ambiguous";
    return std::nullopt;
  }
  error = "shape '" + format_ints(shape) + "' is invalid for input of size " + std::to_string(numel);
  return std::nullopt;
}

std::optional<Ints> view_strides(const Ints& sizes, const Ints& strides, const Ints& new_sizes) {
  if (sizes.empty()) return Ints(new_sizes.size(), 1);
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (numel == 0) {
    // Any strides would do; ATen keeps the old ones for an identical shape, else contiguous.
    if (sizes == new_sizes) return strides;
    return contiguous_strides(new_sizes);
  }
  // Walk the old dims from the innermost, grouping them into chunks that are contiguous in
  // memory; each chunk must be covered exactly by a run of new dims, which then get strides
  // inside that chunk. Size-1 new dims may attach to any chunk.
  Ints out(new_sizes.size());
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_stride = strides.back();
  int64_t chunk_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    chunk_numel *= sizes[d];
    const bool chunk_ends = d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != chunk_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < chunk_numel || new_sizes[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != chunk_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      chunk_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// ---- views --------------------------------------------------------------------------------

namespace {
TensorMeta with_geometry(const TensorMeta& m, Ints sizes, Ints strides, int64_t offset) {
  TensorMeta out = m;
  out.sizes = std::move(sizes);
  out.strides = std::move(strides);
  out.storage_offset = offset;
  return out;
}
}  // namespace

MetaResult view(const TensorMeta& m, const Ints& shape) {
  std::string err;
  auto sizes = infer_size(shape, m.numel(), err);
  if (!sizes) return MetaResult::fail(err);
  auto strides = view_strides(m.sizes, m.strides, *sizes);
  if (!strides)
    return MetaResult::fail(
        "view size is not compatible with input tensor's size and stride (at least one dimension spans across "
        "two contiguous subspaces). Use .reshape(...) instead.");
  return {with_geometry(m, std::move(*sizes), std::move(*strides), m.storage_offset), {}};
}

MetaResult view_dtype(const TensorMeta& m, c10::ScalarType to) {
  const int64_t from_size = static_cast<int64_t>(c10::elementSize(m.dtype));
  const int64_t to_size = static_cast<int64_t>(c10::elementSize(to));
  TensorMeta out = m;
  out.dtype = to;
  if (from_size == to_size) return {std::move(out), {}};
  const std::string what = std::string(" to view ") + c10::toString(m.dtype) + " as " + c10::toString(to) +
                           " (different element sizes)";
  if (m.dim() == 0) return MetaResult::fail("self.dim() cannot be 0" + what);
  if (m.strides.back() != 1)
    return MetaResult::fail("self.stride(-1) must be 1" + what + ", but got " + std::to_string(m.strides.back()));
  if (from_size > to_size) {  // narrower elements: everything scales up
    const int64_t ratio = from_size / to_size;
    out.sizes.back() *= ratio;
    for (size_t i = 0; i + 1 < out.strides.size(); ++i) out.strides[i] *= ratio;
    out.storage_offset *= ratio;
    return {std::move(out), {}};
  }
  const int64_t ratio = to_size / from_size;  // wider elements: everything must divide
  const std::string by = " must be divisible by " + std::to_string(ratio) + what + ", but got ";
  if (m.sizes.back() % ratio != 0) return MetaResult::fail("self.size(-1)" + by + std::to_string(m.sizes.back()));
  for (size_t i = 0; i + 1 < m.strides.size(); ++i)
    if (m.strides[i] % ratio != 0)
      return MetaResult::fail("self.stride(" + std::to_string(i) + ")" + by + std::to_string(m.strides[i]));
  if (m.storage_offset % ratio != 0)
    return MetaResult::fail("self.storage_offset()" + by + std::to_string(m.storage_offset));
  out.sizes.back() /= ratio;
  for (size_t i = 0; i + 1 < out.strides.size(); ++i) out.strides[i] /= ratio;
  out.storage_offset /= ratio;
  return {std::move(out), {}};
}

MetaResult permute(const TensorMeta& m, const Ints& dims) {
  if (static_cast<int64_t>(dims.size()) != m.dim())
    return MetaResult::fail("number of dimensions in the tensor input does not match the length of the desired "
                            "ordering of dimensions i.e. input.dim() = " + std::to_string(m.dim()) +
                            " is not equal to len(dims) = " + std::to_string(dims.size()));
  Ints sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    std::string err;
    auto d = wrap_dim(dims[i], m.dim(), err);
    if (!d) return MetaResult::fail(err);
    if (seen[*d]) return MetaResult::fail("duplicate dims are not allowed.");
    seen[*d] = true;
    sizes[i] = m.sizes[*d];
    strides[i] = m.strides[*d];
  }
  return {with_geometry(m, std::move(sizes), std::move(strides), m.storage_offset), {}};
}

TensorMeta transpose(const TensorMeta& m, int64_t d0, int64_t d1) {
  TensorMeta out = m;
  if (m.dim() == 0) return out;
  std::swap(out.sizes[d0], out.sizes[d1]);
  std::swap(out.strides[d0], out.strides[d1]);
  return out;
}

MetaResult expand(const TensorMeta& m, const Ints& target) {
  const int64_t n = static_cast<int64_t>(target.size()), nd = m.dim();
  if (n < nd)
    return MetaResult::fail("the number of sizes provided (" + std::to_string(n) +
                            ") must be greater or equal to the number of dimensions in the tensor (" +
                            std::to_string(nd) + ")");
  Ints sizes(n), strides(n, 0);
  if (nd == 0) {
    // A 0-dim tensor broadcasts everywhere with zero strides.
    for (int64_t i = 0; i < n; ++i) {
      if (target[i] < 0) return MetaResult::fail("The expanded size of the tensor (" + std::to_string(target[i]) +
                                                 ") isn't allowed in a leading, non-existing dimension " +
                                                 std::to_string(i));
      sizes[i] = target[i];
    }
    return {with_geometry(m, std::move(sizes), std::move(strides), m.storage_offset), {}};
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    const int64_t src = nd - (n - i);  // the input dim aligned with output dim i, or < 0
    int64_t size = src >= 0 ? m.sizes[src] : 1;
    int64_t stride = src >= 0 ? m.strides[src] : strides[i + 1] * sizes[i + 1];
    int64_t want = target[i];
    if (want == -1) {
      if (src < 0)
        return MetaResult::fail("The expanded size of the tensor (-1) isn't allowed in a leading, non-existing "
                                "dimension " + std::to_string(i));
      want = size;
    }
    if (want < 0)
      return MetaResult::fail("The expanded size of the tensor (" + std::to_string(want) +
                              ") isn't allowed; sizes must be non-negative or -1");
    if (size != want) {
      if (size != 1)
        return MetaResult::fail("The expanded size of the tensor (" + std::to_string(want) +
                                ") must match the existing size (" + std::to_string(size) +
                                ") at non-singleton dimension " + std::to_string(i) + ".  Target sizes: " +
                                format_ints(target) + ".  Tensor sizes: " + format_ints(m.sizes));
      size = want;
      stride = 0;
    }
    sizes[i] = size;
    strides[i] = stride;
  }
  return {with_geometry(m, std::move(sizes), std::move(strides), m.storage_offset), {}};
}

TensorMeta squeeze(const TensorMeta& m, const Ints& dims) {
  Ints sizes, strides;
  for (int64_t i = 0; i < m.dim(); ++i) {
    const bool listed = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (listed && m.sizes[i] == 1) continue;
    sizes.push_back(m.sizes[i]);
    strides.push_back(m.strides[i]);
  }
  return with_geometry(m, std::move(sizes), std::move(strides), m.storage_offset);
}

TensorMeta unsqueeze(const TensorMeta& m, int64_t dim) {
  TensorMeta out = m;
  const int64_t stride = dim >= m.dim() ? 1 : m.sizes[dim] * m.strides[dim];
  out.sizes.insert(out.sizes.begin() + dim, 1);
  out.strides.insert(out.strides.begin() + dim, stride);
  return out;
}

MetaResult select(const TensorMeta& m, int64_t dim, int64_t index) {
  if (m.dim() == 0) return MetaResult::fail("select() cannot be applied to a 0-dim tensor.");
  const int64_t size = m.sizes[dim];
  if (index < -size || index >= size)
    return MetaResult::fail("index " + std::to_string(index) + " is out of bounds for dimension " +
                            std::to_string(dim) + " with size " + std::to_string(size));
  if (index < 0) index += size;
  TensorMeta out = m;
  out.storage_offset += index * m.strides[dim];
  out.sizes.erase(out.sizes.begin() + dim);
  out.strides.erase(out.strides.begin() + dim);
  return {std::move(out), {}};
}

TensorMeta slice(const TensorMeta& m, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                 int64_t step) {
  const int64_t size = m.sizes[dim];
  int64_t b = start.value_or(0), e = end.value_or(INT64_MAX);
  if (b < 0) b += size;
  if (e < 0) e += size;
  b = std::clamp<int64_t>(b, 0, size);
  e = std::clamp<int64_t>(e, b, size);
  TensorMeta out = m;
  out.storage_offset += b * m.strides[dim];
  out.sizes[dim] = (e - b + step - 1) / step;
  out.strides[dim] *= step;
  return out;
}

MetaResult narrow(const TensorMeta& m, int64_t dim, int64_t start, int64_t length) {
  if (m.dim() == 0) return MetaResult::fail("narrow() cannot be applied to a 0-dim tensor.");
  if (length < 0) return MetaResult::fail("narrow(): length must be non-negative.");
  const int64_t size = m.sizes[dim];
  if (start < -size || start > size)
    return MetaResult::fail("start out of range (expected to be in range of [" + std::to_string(-size) + ", " +
                            std::to_string(size) + "], but got " + std::to_string(start) + ")");
  if (start < 0) start += size;
  if (start > size - length)
    return MetaResult::fail("start (" + std::to_string(start) + ") + length (" + std::to_string(length) +
                            ") exceeds dimension size (" + std::to_string(size) + ").");
  return {slice(m, dim, start, start + length, 1), {}};
}

TensorMeta diagonal(const TensorMeta& m, int64_t offset, int64_t d1, int64_t d2) {
  int64_t diag = offset >= 0 ? std::min(m.sizes[d1], m.sizes[d2] - offset)
                             : std::min(m.sizes[d1] + offset, m.sizes[d2]);
  diag = std::max<int64_t>(diag, 0);
  TensorMeta out = m;
  // Offsets "off the end" give an empty result; ATen then leaves the storage offset alone.
  if (diag > 0) out.storage_offset += offset >= 0 ? offset * m.strides[d2] : -offset * m.strides[d1];
  const int64_t stride = m.strides[d1] + m.strides[d2];
  for (int64_t d : {std::max(d1, d2), std::min(d1, d2)}) {
    out.sizes.erase(out.sizes.begin() + d);
    out.strides.erase(out.strides.begin() + d);
  }
  out.sizes.push_back(diag);
  out.strides.push_back(stride);
  return out;
}

MetaResult unfold(const TensorMeta& m, int64_t dim, int64_t size, int64_t step) {
  const int64_t max_size = m.dim() == 0 ? 1 : m.sizes[dim];
  if (size > max_size)
    return MetaResult::fail("maximum size for tensor at dimension " + std::to_string(dim) + " is " +
                            std::to_string(max_size) + " but size is " + std::to_string(size));
  if (size < 0) return MetaResult::fail("size is " + std::to_string(size) + " but must be >= 0");
  if (step <= 0) return MetaResult::fail("step is " + std::to_string(step) + " but must be > 0");
  TensorMeta out = m;
  out.sizes.push_back(size);
  out.strides.push_back(m.dim() == 0 ? 1 : m.strides[dim]);
  if (m.dim() > 0) {
    out.sizes[dim] = (m.sizes[dim] - size) / step + 1;
    out.strides[dim] = step * m.strides[dim];
  }
  return {std::move(out), {}};
}

std::vector<TensorMeta> split_sizes_views(const TensorMeta& m, int64_t dim, const Ints& sizes) {
  std::vector<TensorMeta> out;
  int64_t start = 0;
  for (int64_t len : sizes) {
    out.push_back(slice(m, dim, start, start + len, 1));
    start += len;
  }
  return out;
}

std::vector<TensorMeta> split_points_views(const TensorMeta& m, int64_t dim, const Ints& points) {
  std::vector<TensorMeta> out;
  int64_t start = 0;
  for (int64_t p : points) {
    out.push_back(slice(m, dim, start, p, 1));
    start = p;
  }
  out.push_back(slice(m, dim, start, m.sizes[dim], 1));
  return out;
}

// ---- copies -------------------------------------------------------------------------------

TensorMeta fresh(const TensorMeta& like, Ints sizes, Ints strides) {
  return with_geometry(like, std::move(sizes), std::move(strides), 0);
}

TensorMeta fresh_contiguous(const TensorMeta& like, Ints sizes) {
  Ints strides = contiguous_strides(sizes);
  return fresh(like, std::move(sizes), std::move(strides));
}

}  // namespace fastdyn::codegen::meta
