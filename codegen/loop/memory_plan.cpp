// codegen/loop/memory_plan.cpp — plan_memory: buffer slots for every materialised value.
//
// Inputs and extern results get a slot each (the caller's / ATen's tensor). A kernel-written
// temporary takes the slot of a temporary that died at an earlier step when both have the same
// dtype and the same storage size; values that are graph outputs (or the roots of outputs that
// are views) own their slot alone, since the caller keeps them. Aliases use their root's slot.
#include "codegen/loop/passes.h"

#include "runtime/errors.h"

#include <algorithm>

namespace fastdyn::codegen::loop {
namespace {

int64_t storage_span(const TensorMeta& m) {
  if (m.numel() == 0) return 0;
  int64_t span = 1;
  for (size_t d = 0; d < m.sizes.size(); ++d) span += (m.sizes[d] - 1) * m.strides[d];
  return span;
}

// The value whose slot v lives in, through chains of aliases: a view of a value that the fusion
// then stored directly into an input (`x.sub_(n); x.reshape(...)`: v2 -> v1 -> the input) reads
// the input, whose slot must live until that read (difftest seed 52656: released after the first
// kernel once inputs were released after their last reader, the second one read freed memory).
ValueId root_of(const Program& p, ValueId v) {
  while (p.plans[static_cast<size_t>(v)].kind == ValuePlan::Kind::Alias) v = p.plans[static_cast<size_t>(v)].root;
  return v;
}

}  // namespace

Program plan_memory(Program p) {
  const size_t nv = p.graph.values.size();
  // Step index of each value's first write and last read (through aliases: the root's).
  std::vector<int64_t> first(nv, -1), last(nv, -1);
  std::vector<bool> pinned(nv, false);
  for (ValueId v : p.graph.outputs) pinned[static_cast<size_t>(root_of(p, v))] = true;
  auto read = [&](ValueId v, int64_t step) {
    size_t r = static_cast<size_t>(root_of(p, v));
    last[r] = std::max(last[r], step);
  };
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    const auto step = static_cast<int64_t>(s);
    if (st.kind == Step::Kind::Extern) {
      const Node& n = p.graph.nodes[static_cast<size_t>(st.index)];
      for_each_value_input(n, [&](ValueId v) { read(v, step); });
      continue;
    }
    for (const Stage& sg : p.kernels[static_cast<size_t>(st.index)].stages) {
      for (const Access& a : sg.loads) read(a.value, step);
      for (const Store& w : sg.stores) {
        size_t r = static_cast<size_t>(root_of(p, w.dst.value));
        if (first[r] < 0) first[r] = step;
        last[r] = std::max(last[r], step);
      }
    }
  }

  p.slot_owner.clear();
  std::vector<int64_t> slot_free_after;  // step after which the slot is free (-2: never)
  for (ValueId v : p.graph.inputs) {
    p.plans[static_cast<size_t>(v)].slot = static_cast<int32_t>(p.slot_owner.size());
    p.slot_owner.push_back(v);
    slot_free_after.push_back(-2);
  }
  // Buffers in order of first write so that a slot is handed on only after its last reader.
  std::vector<ValueId> order;
  for (size_t v = 0; v < nv; ++v) {
    const ValuePlan& pl = p.plans[v];
    if (pl.kind == ValuePlan::Kind::Extern || pl.kind == ValuePlan::Kind::Buffer) order.push_back(static_cast<ValueId>(v));
  }
  std::stable_sort(order.begin(), order.end(), [&](ValueId a, ValueId b) { return first[static_cast<size_t>(a)] < first[static_cast<size_t>(b)]; });
  for (ValueId v : order) {
    ValuePlan& pl = p.plans[static_cast<size_t>(v)];
    const TensorMeta& m = p.graph.meta(v);
    int32_t slot = -1;
    if (pl.kind == ValuePlan::Kind::Buffer && !pinned[static_cast<size_t>(v)] && first[static_cast<size_t>(v)] >= 0) {
      for (size_t s = 0; s < p.slot_owner.size(); ++s) {
        const TensorMeta& o = p.graph.meta(p.slot_owner[s]);
        if (slot_free_after[s] >= 0 && slot_free_after[s] < first[static_cast<size_t>(v)] &&
            p.plans[static_cast<size_t>(p.slot_owner[s])].kind == ValuePlan::Kind::Buffer && o.dtype == m.dtype &&
            storage_span(o) == storage_span(m)) {
          slot = static_cast<int32_t>(s);
          break;
        }
      }
    }
    if (slot < 0) {
      slot = static_cast<int32_t>(p.slot_owner.size());
      p.slot_owner.push_back(v);
      slot_free_after.push_back(-2);
    }
    pl.slot = slot;
    const bool reusable = pl.kind == ValuePlan::Kind::Buffer && !pinned[static_cast<size_t>(v)];
    slot_free_after[static_cast<size_t>(slot)] = reusable ? std::max(last[static_cast<size_t>(v)], first[static_cast<size_t>(v)]) : -2;
  }
  for (size_t v = 0; v < nv; ++v) {
    ValuePlan& pl = p.plans[v];
    if (pl.kind == ValuePlan::Kind::Alias) pl.slot = p.plans[static_cast<size_t>(pl.root)].slot;
  }
  // Lifetimes: a buffer is allocated before its first write and every buffer or extern result is
  // dropped after its last reader, as eager frees a tensor when its last use is done (what a
  // backward program holds at once is then what eager's autograd would).
  std::vector<int64_t> written_at(nv, -1);
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].kind == Step::Kind::Extern)
      for (ValueId v : p.graph.nodes[static_cast<size_t>(p.steps[s].index)].outputs) written_at[static_cast<size_t>(v)] = static_cast<int64_t>(s);
  const size_t slots = p.slot_owner.size();
  p.slot_alloc.assign(slots, -1);
  p.slot_release.assign(slots, -1);
  std::vector<bool> forever(slots, false);
  for (size_t v = 0; v < nv; ++v) {
    const ValuePlan& pl = p.plans[v];
    if (pl.kind != ValuePlan::Kind::Buffer && pl.kind != ValuePlan::Kind::Extern) continue;
    const size_t s = static_cast<size_t>(pl.slot);
    if (pinned[v]) forever[s] = true;
    const int64_t born = pl.kind == ValuePlan::Kind::Buffer ? first[v] : written_at[v];
    if (pl.kind == ValuePlan::Kind::Buffer)
      p.slot_alloc[s] = p.slot_alloc[s] < 0 ? std::max<int64_t>(born, 0) : std::min(p.slot_alloc[s], std::max<int64_t>(born, 0));
    p.slot_release[s] = std::max({p.slot_release[s], last[v], born});
  }
  // An input's slot holds a reference of its own, dropped after its last reader too: with
  // run_taking (a compiled backward's saved values) it is the last one, and the memory is freed
  // there as eager's autograd frees a node's saved tensors. Outputs and the bases of outputs keep theirs.
  for (ValueId v : p.graph.inputs) {
    const size_t s = static_cast<size_t>(p.plans[static_cast<size_t>(v)].slot);
    if (pinned[static_cast<size_t>(v)] || p.steps.empty()) forever[s] = true;
    else p.slot_release[s] = std::max<int64_t>(last[static_cast<size_t>(v)], 0);
  }
  for (size_t s = 0; s < slots; ++s)
    if (forever[s] || p.slot_release[s] < 0) p.slot_release[s] = -1;
  return p;
}

}  // namespace fastdyn::codegen::loop
