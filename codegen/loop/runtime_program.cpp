// codegen/loop/runtime_program.cpp — see runtime_program.h.
#include "codegen/loop/runtime_program.h"

#include "codegen/aten/aten_backend.h"
#include "codegen/aten/channels_last_conv.h"
#include "codegen/aten/prepacked_linear.h"
#include "codegen/loop/check_plan.h"
#include "codegen/loop/kernel_input.h"
#include "runtime/errors.h"

#include <algorithm>

namespace fastdyn::codegen::loop {

runtime::SlotTensor slot_tensor(const Program& p, const std::string& backend, ValueId v) {
  const ValuePlan& pl = p.plans[static_cast<size_t>(v)];
  const TensorMeta& m = p.graph.meta(v);
  if (pl.slot < 0) throw InternalError(backend + " backend: v" + std::to_string(v) + " was never materialised");
  runtime::SlotTensor t;
  t.slot = pl.slot;
  if (pl.kind == ValuePlan::Kind::Alias) {
    t.view = true;
    t.offset_delta = m.storage_offset - p.graph.meta(pl.root).storage_offset;
  } else if (pl.kind == ValuePlan::Kind::Buffer) {
    // The slot holds the buffer allocated for its owner's metadata (plan_memory reuses buffer
    // slots only among buffers).
    const TensorMeta& owner = p.graph.meta(p.slot_owner[static_cast<size_t>(pl.slot)]);
    t.view = owner.sizes != m.sizes || owner.strides != m.strides;
  }
  if (t.view) {
    t.sizes = m.sizes;
    t.strides = m.strides;
  }
  return t;
}

Extern compile_extern(const Graph& g, const Node& n) {
  Extern e;
  for_each_value_input(n, [&](ValueId v) {  // each value once, in argument order
    if (std::find(e.inputs.begin(), e.inputs.end(), v) == e.inputs.end()) e.inputs.push_back(v);
  });
  e.exe = compile_prepacked_linear(g, n);
  if (!e.exe) e.exe = compile_channels_last_conv(g, n);
  e.prepacked = e.exe != nullptr;
  if (e.prepacked) return e;
  // The node alone, on the aten backend: a graph of its own values only (the whole graph's
  // metadata, copied once per extern, was most of a dynamic graph's cost at each new size).
  Graph sub;
  std::vector<std::pair<ValueId, ValueId>> ids;  // (in g, in sub)
  auto take = [&](ValueId v) {
    if (v < 0) return v;
    for (const auto& [from, to] : ids)
      if (from == v) return to;
    ids.emplace_back(v, sub.add_value(g.meta(v)));
    return ids.back().second;
  };
  for (ValueId v : e.inputs) sub.inputs.push_back(take(v));
  Node node = n;
  for (Arg& a : node.args) {
    if (a.kind == Arg::Kind::Value) a.value = take(a.value);
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId& v : a.values) v = take(v);
  }
  for (ValueId& v : node.outputs) v = take(v);
  sub.outputs = node.outputs;
  sub.nodes.push_back(std::move(node));
  e.exe = compile_aten(sub);
  return e;
}

runtime::Program runtime_program(const Program& p, const std::string& backend, std::string text, std::vector<Extern> externs,
                                 std::vector<at::Tensor> constants, runtime::ExecutablePtr aliased) {
  const Graph& g = p.graph;
  runtime::Program r;
  r.backend = backend;
  r.text = std::move(text);
  r.num_slots = static_cast<int32_t>(p.slot_owner.size());
  FD_CHECK(constants.size() <= g.inputs.size(), "more folded constants than graph inputs");
  const size_t n_inputs = g.inputs.size() - constants.size();  // folded constants come last
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const int32_t slot = p.plans[static_cast<size_t>(g.inputs[i])].slot;
    if (i < n_inputs)
      r.input_slots.push_back(slot);
    else
      r.constants.push_back({slot, std::move(constants[i - n_inputs])});
  }
  for (size_t s = 0; s < p.slot_owner.size(); ++s) {
    const ValueId v = p.slot_owner[s];
    if (p.plans[static_cast<size_t>(v)].kind != ValuePlan::Kind::Buffer) continue;
    const TensorMeta& m = g.meta(v);
    r.buffers.push_back({static_cast<int32_t>(s), m.sizes, m.strides, at::TensorOptions().dtype(m.dtype).device(m.device),
                         s < p.slot_alloc.size() ? static_cast<int32_t>(std::max<int64_t>(p.slot_alloc[s], 0)) : 0});
  }
  size_t e = 0;
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::Kernel) {
      r.steps.emplace_back(runtime::KernelLaunch{nullptr, kernel_slots(p, p.kernels[static_cast<size_t>(s.index)])});
      continue;
    }
    runtime::ExternCall call;
    call.exe = std::move(externs.at(e).exe);
    for (ValueId v : externs[e].inputs) call.inputs.push_back(slot_tensor(p, backend, v));
    for (ValueId v : g.nodes[static_cast<size_t>(s.index)].outputs) {
      const int32_t slot = p.plans[static_cast<size_t>(v)].slot;
      const TensorMeta& m = g.meta(v);
      call.outputs.push_back(slot < 0 ? runtime::ExternResult{} : runtime::ExternResult{slot, m.sizes, m.strides});
    }
    r.steps.emplace_back(std::move(call));
    ++e;
  }
  for (ValueId v : g.outputs) r.outputs.push_back(slot_tensor(p, backend, v));
  r.release_after.resize(r.steps.size());
  for (size_t s = 0; s < p.slot_release.size(); ++s)
    if (p.slot_release[s] >= 0 && static_cast<size_t>(p.slot_release[s]) < r.steps.size())
      r.release_after[static_cast<size_t>(p.slot_release[s])].push_back(static_cast<int32_t>(s));
  for (const WriteBack& w : p.writebacks) {
    size_t i = 0;
    while (g.inputs.at(i) != w.input) ++i;
    r.mutated_inputs.push_back({static_cast<int32_t>(i), w.bumps});
  }
  r.extern_writes_inputs = !p.extern_writes.empty();
  for (ValueId v : p.extern_writes) {  // ATen's in-place call bumps the version itself
    size_t i = 0;
    while (g.inputs.at(i) != v) ++i;
    r.mutated_inputs.push_back({static_cast<int32_t>(i), 0});
  }
  r.aliased = std::move(aliased);
  // NB: only in accuracy mode: the plan compiles the whole graph once more, on ATen.
  if (runtime::check_enabled()) r.check = check_plan(p, backend);
  return r;
}

}  // namespace fastdyn::codegen::loop
