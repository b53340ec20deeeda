// codegen/passes/constant_fold.cpp — fold_constants (see constant_fold.h).
#include "codegen/passes/constant_fold.h"

#include <c10/core/ScalarType.h>

#include <algorithm>

namespace fastdyn::codegen {
namespace {

bool foldable_op(const Node& n) {
  switch (op_info(n.op).category) {
    case OpCategory::Pointwise:
    case OpCategory::Reduction:
    case OpCategory::View:
    case OpCategory::Extern: return true;
    case OpCategory::Factory: return n.op != OpId::empty_memory_format && n.op != OpId::empty_like;  // garbage
    case OpCategory::InPlace:
    case OpCategory::Random: return false;
  }
  return false;
}

}  // namespace

ConstantFolding fold_constants(const Graph& g) {
  const size_t nv = g.values.size();
  std::vector<int32_t> producer(nv, -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId o : g.nodes[i].outputs) producer[static_cast<size_t>(o)] = static_cast<int32_t>(i);
  // v and, back through view chains, the values it views (views record their base first).
  auto mark_with_bases = [&](ValueId v, std::vector<bool>& marks) {
    while (true) {
      marks[static_cast<size_t>(v)] = true;
      const int32_t p = producer[static_cast<size_t>(v)];
      if (p < 0) return;
      const Node& pn = g.nodes[static_cast<size_t>(p)];
      if (op_info(pn.op).category != OpCategory::View || pn.args.empty() || pn.args[0].kind != Arg::Kind::Value) return;
      v = pn.args[0].value;
    }
  };
  // Values whose storage an in-place op writes, and outputs with what they view (the caller owns those).
  std::vector<bool> written(nv, false), is_output(nv, false);
  for (const Node& n : g.nodes)
    if (op_info(n.op).category == OpCategory::InPlace && !n.args.empty() && n.args[0].kind == Arg::Kind::Value)
      mark_with_bases(n.args[0].value, written);
  for (ValueId o : g.outputs) mark_with_bases(o, is_output);

  // The bytes a folded value pins: its storage extent (an expanded view pins its base's).
  auto pinned_bytes = [&](ValueId v) {
    const TensorMeta& m = g.meta(v);
    int64_t extent = 1;
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      if (m.sizes[d] == 0) return int64_t{0};
      extent += (m.sizes[d] - 1) * std::abs(d < m.strides.size() ? m.strides[d] : 1);
    }
    return extent * static_cast<int64_t>(c10::elementSize(m.dtype));
  };
  std::vector<bool> blocked(g.nodes.size(), false);  // kept per call to stay within the budget
  std::vector<bool> constant(nv, false), folded_node(g.nodes.size(), false), needed(nv, false);
  while (true) {
    std::fill(constant.begin(), constant.end(), false);
    std::fill(folded_node.begin(), folded_node.end(), false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (blocked[i] || !foldable_op(n)) continue;
      bool ok = true;
      if (op_info(n.op).category != OpCategory::Factory)  // a factory reads its tensors' metadata only
        for_each_value_input(n, [&](ValueId v) { ok = ok && constant[static_cast<size_t>(v)]; });
      for (ValueId o : n.outputs) ok = ok && !written[static_cast<size_t>(o)] && !is_output[static_cast<size_t>(o)];
      if (!ok) continue;
      folded_node[i] = true;
      for (ValueId o : n.outputs) constant[static_cast<size_t>(o)] = true;
    }
    // The folded values the rest reads. Past the byte budget, the node making the largest of them
    // runs per call instead (a [B, H, L, S] attention bias), and its folded inputs are what the rest
    // reads: the small values before it (a causal mask's cumsum) stay folded.
    std::fill(needed.begin(), needed.end(), false);
    int64_t bytes = 0, largest_bytes = -1;
    ValueId largest = -1;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (folded_node[i]) continue;
      for_each_value_input(g.nodes[i], [&](ValueId v) {
        if (!constant[static_cast<size_t>(v)] || needed[static_cast<size_t>(v)]) return;
        needed[static_cast<size_t>(v)] = true;
        const int64_t b = pinned_bytes(v);
        bytes += b;
        if (b > largest_bytes) largest = v, largest_bytes = b;
      });
    }
    if (bytes <= kMaxFoldedBytes || largest < 0) break;
    blocked[static_cast<size_t>(producer[static_cast<size_t>(largest)])] = true;
  }
  ConstantFolding f;
  if (std::none_of(needed.begin(), needed.end(), [](bool b) { return b; })) {
    f.rest = g;
    return f;
  }
  f.constants.values = g.values;
  f.rest.values = g.values;
  f.rest.binding = g.binding;
  f.rest.inputs = g.inputs;
  std::vector<bool> meta_input(nv, false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    (folded_node[i] ? f.constants.nodes : f.rest.nodes).push_back(g.nodes[i]);
    if (!folded_node[i]) continue;
    // Inputs of the folded graph: graph inputs, and the values a folded factory reads for their
    // metadata only (zeros_like(cos(x)): cos is not folded; evaluated on a placeholder of its meta).
    for_each_value_input(g.nodes[i], [&](ValueId v) {
      const int32_t p = producer[static_cast<size_t>(v)];
      if ((p < 0 || !folded_node[static_cast<size_t>(p)]) && !meta_input[static_cast<size_t>(v)]) {
        meta_input[static_cast<size_t>(v)] = true;
        f.constants.inputs.push_back(v);
      }
    });
  }
  for (size_t v = 0; v < nv; ++v)
    if (needed[v]) {
      f.constants.outputs.push_back(static_cast<ValueId>(v));
      f.rest.inputs.push_back(static_cast<ValueId>(v));
    }
  f.rest.outputs = g.outputs;
  return f;
}

}  // namespace fastdyn::codegen
