// codegen/passes/graph_passes.cpp — see graph_passes.h.
#include "codegen/passes/graph_passes.h"

#include <ATen/ATen.h>

#include <optional>

#include "codegen/aten/aten_backend.h"
#include "codegen/passes/attention_decompose.h"
#include "codegen/passes/channels_last.h"
#include "codegen/passes/constant_fold.h"
#include "codegen/passes/pass_timer.h"
#include "codegen/passes/stacked_scalars.h"

namespace fastdyn::codegen {
namespace {

// The folded values, computed now on ATen, each laid out as its metadata says (kernels address
// inputs by the metadata's strides: a value ATen lays out otherwise, as CUDA's index does for
// some, is copied into that layout); nullopt when one comes back with other sizes, or otherwise
// laid out where the metadata's layout overlaps itself.
std::optional<std::vector<at::Tensor>> evaluate_constants(const Graph& constants) {
  std::vector<at::Tensor> placeholders;
  for (ValueId v : constants.inputs) {
    const TensorMeta& m = constants.meta(v);
    placeholders.push_back(at::empty_strided(m.sizes, m.strides, at::TensorOptions().dtype(m.dtype).device(m.device)));
  }
  std::vector<at::Tensor> values = compile_aten(constants)->run(placeholders);
  for (size_t i = 0; i < values.size(); ++i) {
    const TensorMeta& m = constants.meta(constants.outputs[i]);
    at::Tensor& t = values[i];
    if (t.sizes() != c10::IntArrayRef(m.sizes)) return std::nullopt;
    if (t.numel() > 1 && t.strides() != c10::IntArrayRef(m.strides)) {
      at::Tensor laid_out = at::empty_strided(m.sizes, m.strides, t.options());
      if (!laid_out.is_non_overlapping_and_dense()) return std::nullopt;  // an expanded layout: no copy makes it
      t = laid_out.copy_(t);
    }
  }
  return values;
}

}  // namespace

RewrittenGraph rewrite_graph(const Graph& g) {
  PassTimer timer;
  RewrittenGraph out;
  Graph written_out = decompose_small_attention(forward_stacked_scalars(g));
  timer.lap("forward_stacked_scalars, decompose_small_attention");
  ConstantFolding folding = fold_constants(written_out);
  if (!folding.constants.nodes.empty()) {
    if (auto values = evaluate_constants(folding.constants)) {
      out.constants = std::move(*values);
      out.folded = std::move(folding.constants);
      out.graph = std::move(folding.rest);
    }
  }
  if (out.constants.empty()) out.graph = std::move(written_out);
  timer.lap("fold_constants");
  out.graph = prefer_channels_last(out.graph);
  timer.lap("prefer_channels_last");
  return out;
}

}  // namespace fastdyn::codegen
