// codegen/loop/check_plan.cpp — see check_plan.h.
#include "codegen/loop/check_plan.h"

#include <algorithm>

#include "codegen/aten/aten_backend.h"
#include "codegen/loop/runtime_program.h"
#include "runtime/journal.h"

namespace fastdyn::codegen::loop {
namespace {

// The graph value a store computes: its own, or for a write-back (a store into a mutated input,
// the caller's tensor) the input's final value.
ValueId stored_value(const Program& p, ValueId dst) {
  for (const WriteBack& w : p.writebacks)
    if (w.input == dst) return w.value;
  return dst;
}

}  // namespace

std::shared_ptr<const runtime::CheckPlan> check_plan(const Program& p, const std::string& backend) {
  const Graph& g = p.graph;
  std::vector<bool> computed(g.values.size(), false);  // by a node, so that the reference has it
  for (const Node& n : g.nodes) {
    if (op_info(n.op).category == OpCategory::Random) return nullptr;
    for (ValueId v : n.outputs) computed[static_cast<size_t>(v)] = true;
  }
  // A value is compared once, after the last kernel that stores it: a cat's pieces are stored by
  // several kernels, and a softmax's kernel stores its exponentials and then their quotients.
  std::vector<int64_t> last_step(g.values.size(), -1);
  std::vector<std::string> writers(g.values.size());
  for (size_t si = 0; si < p.steps.size(); ++si) {
    if (p.steps[si].kind != Step::Kind::Kernel) continue;
    const Kernel& k = p.kernels[static_cast<size_t>(p.steps[si].index)];
    for (const Stage& st : k.stages)
      for (const Store& w : st.stores) {
        const auto v = static_cast<size_t>(w.dst.value);
        if (last_step[v] != static_cast<int64_t>(si)) writers[v] += (writers[v].empty() ? "" : ", ") + k.name;
        last_step[v] = static_cast<int64_t>(si);
      }
  }
  auto plan = std::make_shared<runtime::CheckPlan>();
  Graph reference = g;
  reference.outputs.clear();
  for (size_t si = 0; si < p.steps.size(); ++si) {
    plan->steps.emplace_back();
    if (p.steps[si].kind != Step::Kind::Kernel) continue;
    const Kernel& k = p.kernels[static_cast<size_t>(p.steps[si].index)];
    runtime::CheckPlan::Kernel& checked = plan->steps.back();
    checked.name = k.name;
    for (const Stage& st : k.stages)
      for (const Store& w : st.stores) {
        const ValueId dst = w.dst.value, value = stored_value(p, dst);
        if (last_step[static_cast<size_t>(dst)] != static_cast<int64_t>(si) || !computed[static_cast<size_t>(value)] ||
            p.plans[static_cast<size_t>(dst)].slot < 0)
          continue;
        if (std::any_of(checked.values.begin(), checked.values.end(), [&](const auto& c) { return c.value == value; })) continue;
        auto out = std::find(reference.outputs.begin(), reference.outputs.end(), value);
        if (out == reference.outputs.end()) out = reference.outputs.insert(out, value);
        const std::string& by = writers[static_cast<size_t>(dst)];
        checked.values.push_back({value, slot_tensor(p, backend, dst), static_cast<int32_t>(out - reference.outputs.begin()),
                                  by.find(',') == std::string::npos ? "" : "v" + std::to_string(value) + " is stored by " + by});
      }
  }
  for (ValueId v : g.inputs) plan->input_slots.push_back(p.plans[static_cast<size_t>(v)].slot);
  try {
    plan->reference = compile_aten(reference);
  } catch (const std::exception&) {
    return nullptr;  // a graph only the loop IR can run: nothing to compare with
  }
  plan->journal_graph = runtime::journal::current();
  return plan;
}

}  // namespace fastdyn::codegen::loop
