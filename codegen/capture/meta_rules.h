// codegen/capture/meta_rules.h — metadata rules shared by the family binders (codegen/ layer).
//
// Computes what eager ATen would produce, without running ATen: broadcasting, type promotion
// (PyTorch's result_type with its three priority classes: dimensioned tensors, zero-dim tensors,
// wrapped Python numbers), the output strides TensorIterator chooses for elementwise ops (its
// fast paths for same-shaped contiguous / channels-last / dense inputs, else the permutation it
// derives from the inputs' strides), empty_like's preserve-format rule, and reduction shapes.
// Every rule here is cross-checked against eager ATen by tests/cpp/capture/test_capture_*.cpp.
// No ATen headers: only c10 types through graph.h.
#pragma once
#include "codegen/capture/capture.h"
#include "codegen/graph/graph.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fastdyn::codegen {

// ---- strides and layouts ----------------------------------------------------------------------
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes);  // 4-d sizes only
bool is_contiguous(const TensorMeta& m);
bool is_channels_last_contiguous(const TensorMeta& m);  // false unless 4-d
bool is_non_overlapping_and_dense(const TensorMeta& m);
// Strides of empty_like(m) / clone(m) with memory_format=preserve_format.
std::vector<int64_t> preserve_format_strides(const TensorMeta& m);
// Strides of at::empty(sizes, memory_format=suggest_memory_format(m)) (contiguous or channels-last).
std::vector<int64_t> suggested_format_strides(const TensorMeta& m, const std::vector<int64_t>& sizes);

// Output strides TensorIterator gives a freshly allocated output of `shape` for these operands
// (zero-dim operands, e.g. wrapped Python scalars, included: they matter to its fast path).
std::vector<int64_t> tensor_iterator_strides(const std::vector<int64_t>& shape,
                                             const std::vector<const TensorMeta*>& operands);

// ---- shapes -----------------------------------------------------------------------------------
std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<std::vector<int64_t>>& shapes);
// Wraps a possibly negative dim into [0, ndim) (a 0-d tensor accepts dims -1 and 0); nullopt if out of range.
std::optional<int64_t> wrap_dim(int64_t dim, int64_t ndim);
std::string shape_str(const std::vector<int64_t>& v);  // "[2, 3]"
// Reduced shape: dims marked in `reduce` removed, or kept as 1 with keepdim.
std::vector<int64_t> reduced_shape(const std::vector<int64_t>& sizes, const std::vector<bool>& reduce, bool keepdim);
// Parses a dim list (None/empty = all dims) into a mask; error text names `op` and the dim.
std::optional<std::string> reduction_mask(const char* op, const std::vector<int64_t>& dims, int64_t ndim,
                                          std::vector<bool>& mask);

// ---- dtypes -----------------------------------------------------------------------------------
struct DtypeOperand {
  c10::ScalarType dtype;
  bool zero_dim = false;
  bool wrapped = false;  // a Python number
};
// PyTorch's result_type over operands; wrapped floats count as `default_dtype`.
c10::ScalarType result_type(const std::vector<DtypeOperand>& ops, c10::ScalarType default_dtype);
// The dtype a Python number is wrapped as: int -> Long, float -> Double, bool -> Bool.
c10::ScalarType scalar_dtype(const CallArg& a);
bool is_integral(c10::ScalarType t, bool include_bool);
bool is_floating(c10::ScalarType t);
bool can_cast(c10::ScalarType from, c10::ScalarType to);
std::string dtype_name(c10::ScalarType t);  // "Float", as ATen's messages spell it
// `op`'s result dtype by its ops.def Dtype rule, from the common dtype of its tensor operands (one
// operand: its dtype) and the dtype= argument where the op has one; an error (eager's message,
// prefixed by `name`) for dtypes the op rejects. Rows whose rule is Own are the binder's own: an
// internal error.
std::optional<std::string> result_dtype(OpId op, const std::string& name, c10::ScalarType common,
                                        std::optional<c10::ScalarType> requested, c10::ScalarType default_dtype,
                                        c10::ScalarType& out);

// ---- metas ------------------------------------------------------------------------------------
bool any_requires_grad(const Graph& g, const CaptureContext& ctx, const std::vector<ValueId>& inputs);
TensorMeta make_meta(c10::ScalarType dtype, c10::Device device, std::vector<int64_t> sizes,
                     std::vector<int64_t> strides, bool requires_grad);
TensorMeta contiguous_meta(c10::ScalarType dtype, c10::Device device, std::vector<int64_t> sizes,
                           bool requires_grad);
// A Python number as an Arg (Int/Double/Bool kept).
Arg scalar_arg(const CallArg& a);
// Any bound value as an Arg constant (None, numbers, lists, dtype, str); a Tensor becomes Value.
Arg const_arg(const CallArg& a);

// Insertion sort of `perm` (fastest dim first) with a three-way comparison that may answer
// "ambiguous" (0); ambiguous pairs keep their order and the scan continues past them. This is
// the order both TensorIterator and infer_dense_strides use, ties included.
template <class Cmp>
void sort_dims_fastest_first(std::vector<int64_t>& perm, Cmp should_swap) {
  for (size_t i = 1; i < perm.size(); ++i) {
    size_t d1 = i;
    for (size_t d0 = i; d0-- > 0;) {
      const int c = should_swap(perm[d0], perm[d1]);
      if (c > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
}

}  // namespace fastdyn::codegen
