// runtime/program.cpp — see program.h.
#include "runtime/program.h"

#include "runtime/errors.h"

namespace fastdyn::runtime {
namespace {

void check_slot(const Program& p, int32_t slot, const char* what) {
  if (slot < 0 || slot >= p.num_slots)
    throw InternalError("runtime program (" + p.backend + "): " + what + " names slot " + std::to_string(slot) +
                        " of " + std::to_string(p.num_slots));
}

void check_view(const Program& p, const SlotTensor& t, const char* what) {
  check_slot(p, t.slot, what);
  if (t.view && t.sizes.size() != t.strides.size())
    throw InternalError("runtime program (" + p.backend + "): " + what + " is a view with " +
                        std::to_string(t.sizes.size()) + " sizes and " + std::to_string(t.strides.size()) + " strides");
}

}  // namespace

void check_program(const Program& p) {
  for (int32_t s : p.input_slots) check_slot(p, s, "an input");
  for (const Constant& c : p.constants) check_slot(p, c.slot, "a constant");
  for (const Buffer& b : p.buffers) check_slot(p, b.slot, "a buffer");
  for (const Step& step : p.steps) {
    if (const auto* launch = std::get_if<KernelLaunch>(&step)) {
      if (!launch->kernel) throw InternalError("runtime program (" + p.backend + "): a kernel launch without a kernel");
      for (int32_t s : launch->args) check_slot(p, s, "a kernel argument");
      continue;
    }
    const auto& call = std::get<ExternCall>(step);
    if (!call.exe) throw InternalError("runtime program (" + p.backend + "): an extern call without an executable");
    for (const SlotTensor& t : call.inputs) check_view(p, t, "an extern input");
    for (const ExternResult& r : call.outputs)
      if (r.slot >= 0) check_slot(p, r.slot, "an extern result");
  }
  for (const SlotTensor& t : p.outputs) check_view(p, t, "an output");
  for (const MutatedInput& m : p.mutated_inputs)
    if (m.input < 0 || static_cast<size_t>(m.input) >= p.input_slots.size())
      throw InternalError("runtime program (" + p.backend + "): mutated input " + std::to_string(m.input) + " of " +
                          std::to_string(p.input_slots.size()) + " inputs");
  if (!p.mutated_inputs.empty() && !p.aliased)
    throw InternalError("runtime program (" + p.backend + "): mutated inputs without the aliased fallback");
}

}  // namespace fastdyn::runtime
