// runtime/program_executable.cpp — see program_executable.h.
#include "runtime/program_executable.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "runtime/accuracy_check.h"
#include "runtime/graph_calls.h"
#include "runtime/errors.h"

namespace fastdyn::runtime {
namespace {

// The bytes a tensor's elements can touch: [lo, hi).
std::pair<uintptr_t, uintptr_t> extent(const at::Tensor& t) {
  const auto base = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t span = (t.size(d) - 1) * t.stride(d);
    (span < 0 ? lo : hi) += span;
  }
  const auto item = static_cast<int64_t>(t.element_size());
  return {base + static_cast<uintptr_t>(lo * item), base + static_cast<uintptr_t>((hi + 1) * item)};
}

}  // namespace

ProgramExecutable::ProgramExecutable(Program p) : p_(std::move(p)) {
  check_program(p_);
  for (const Step& step : p_.steps)
    if (const auto* launch = std::get_if<KernelLaunch>(&step)) max_kernel_args_ = std::max(max_kernel_args_, launch->args.size());
  for (size_t i = 0; i < p_.buffers.size(); ++i) buffers_by_step_.push_back(i);
  for (const MutatedInput& m : p_.mutated_inputs) written_.push_back(m.input);
  std::stable_sort(buffers_by_step_.begin(), buffers_by_step_.end(),
                   [&](size_t a, size_t b) { return p_.buffers[a].alloc_step < p_.buffers[b].alloc_step; });
}

std::vector<at::Tensor> ProgramExecutable::run(const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != p_.input_slots.size())
    throw UserError(p_.backend + " backend: graph takes " + std::to_string(p_.input_slots.size()) + " inputs, got " +
                    std::to_string(inputs.size()));
  if (p_.mutated_inputs.empty()) return run_steps(inputs);
  if (overlaps_a_written_input(inputs, written_)) return p_.aliased->run(inputs);
  std::vector<at::Tensor> outputs;
  try {
    outputs = run_steps(inputs);
  } catch (const std::exception&) {
    // The write-backs are the kernels' last stores and cannot fail: the inputs are untouched
    // (unless an extern step wrote one in place). The hook redoes such a frame eagerly when it
    // can (what the frame did before the failing op is then eager's); otherwise the recorded ops
    // run on ATen, which writes and raises as eager does.
    if (!p_.extern_writes_inputs && redo_if_untouched_expected()) {
      note_failed_untouched();
      throw;
    }
    return p_.aliased->run(inputs);
  }
  // NB: after the writes, as eager: for an inference tensor outside inference mode this throws
  // eager's error with the data already written.
  for (const MutatedInput& m : p_.mutated_inputs)
    for (int32_t k = 0; k < m.version_bumps; ++k) inputs[static_cast<size_t>(m.input)].unsafeGetTensorImpl()->bump_version();
  return outputs;
}

std::string ProgramExecutable::describe() const { return "backend " + p_.backend + "\n" + p_.text; }

std::vector<at::Tensor> ProgramExecutable::run_steps(const std::vector<at::Tensor>& inputs) const {
  if (p_.check && check_enabled()) [[unlikely]]
    return run_steps_as<true>(inputs);
  return run_steps_as<false>(inputs);
}

std::vector<at::Tensor> ProgramExecutable::constant_slots() const {
  std::vector<at::Tensor> slots(static_cast<size_t>(p_.num_slots));
  for (const Constant& c : p_.constants) slots[static_cast<size_t>(c.slot)] = c.value;
  return slots;
}

std::vector<at::Tensor> ProgramExecutable::run_taking(std::vector<at::Tensor>&& inputs) {
  // A program that writes into inputs bumps their versions after its steps (or runs the aliased
  // fallback on them), and accuracy mode compares against them: those keep the inputs to the end.
  if (!p_.mutated_inputs.empty() || (p_.check && check_enabled())) {
    std::vector<at::Tensor> taken = std::move(inputs);
    return run(taken);
  }
  if (inputs.size() != p_.input_slots.size()) return run(inputs);  // its error
  std::vector<at::Tensor> slots = constant_slots();
  for (size_t i = 0; i < inputs.size(); ++i) slots[static_cast<size_t>(p_.input_slots[i])] = std::move(inputs[i]);
  inputs.clear();
  return execute<false>(slots, nullptr);
}

template <bool kChecked>
std::vector<at::Tensor> ProgramExecutable::run_steps_as(const std::vector<at::Tensor>& inputs) const {
  std::vector<at::Tensor> slots = constant_slots();
  for (size_t i = 0; i < inputs.size(); ++i) slots[static_cast<size_t>(p_.input_slots[i])] = inputs[i];
  std::optional<CheckedCall> check;
  if constexpr (kChecked) check.emplace(*p_.check, inputs, slots);
  return execute<kChecked>(slots, check ? &*check : nullptr);
}

template <bool kChecked>
std::vector<at::Tensor> ProgramExecutable::execute(std::vector<at::Tensor>& slots, [[maybe_unused]] CheckedCall* check) const {
  // Buffers are allocated just before the step that first writes them (buffers_by_step_); those
  // of a program without steps, after the loop.
  size_t next_buffer = 0;
  auto allocate_before = [&](size_t step) {
    for (; next_buffer < buffers_by_step_.size(); ++next_buffer) {
      const Buffer& b = p_.buffers[buffers_by_step_[next_buffer]];
      if (static_cast<size_t>(b.alloc_step) > step) break;
      slots[static_cast<size_t>(b.slot)] = at::empty_strided(b.sizes, b.strides, b.options);
    }
  };
  std::vector<void*> args(max_kernel_args_, nullptr);
  for (size_t si = 0; si < p_.steps.size(); ++si) {
    allocate_before(si);
    run_step(p_.steps[si], slots, args);
    if constexpr (kChecked) check->after_step(si, slots);
    // Slots whose last reader is done: a buffer, an extern result, or an input (the caller's
    // reference stays; with run_taking the program held the last one).
    if (si < p_.release_after.size())
      for (int32_t slot : p_.release_after[si]) slots[static_cast<size_t>(slot)].reset();
  }
  allocate_before(SIZE_MAX);
  std::vector<at::Tensor> outputs;
  outputs.reserve(p_.outputs.size());
  for (const SlotTensor& s : p_.outputs) outputs.push_back(slot_view(s, slots));
  return outputs;
}

void ProgramExecutable::run_step(const Step& step, std::vector<at::Tensor>& slots, std::vector<void*>& args) const {
  if (const auto* launch = std::get_if<KernelLaunch>(&step)) {
    for (size_t i = 0; i < launch->args.size(); ++i) {
      const at::Tensor& t = slots[static_cast<size_t>(launch->args[i])];
      args[i] = t.defined() ? t.data_ptr() : nullptr;
    }
    launch->kernel->launch(args.data(), launch->sizes.empty() ? nullptr : launch->sizes.data());
    return;
  }
  const auto& call = *std::get_if<ExternCall>(&step);
  std::vector<at::Tensor> ins;
  ins.reserve(call.inputs.size());
  for (const SlotTensor& s : call.inputs) ins.push_back(slot_view(s, slots));
  std::vector<at::Tensor> outs = call.exe->run(ins);
  for (size_t o = 0; o < call.outputs.size(); ++o) {
    const ExternResult& r = call.outputs[o];
    if (r.slot < 0) continue;
    at::Tensor t = std::move(outs[o]);
    // Kernels address extern results with the graph's strides: keep that promise.
    if (t.defined() && t.strides() != c10::IntArrayRef(r.strides) && t.numel() > 1) {
      at::Tensor fixed = at::empty_strided(r.sizes, r.strides, t.options());
      fixed.copy_(t);
      t = fixed;
    }
    slots[static_cast<size_t>(r.slot)] = std::move(t);
  }
}

bool overlaps_a_written_input(const std::vector<at::Tensor>& inputs, const std::vector<int32_t>& written) {
  if (written.empty()) return false;
  // One sweep over the inputs' byte extents in address order (an optimizer's step mutates
  // hundreds of inputs: pairwise it was most of the call): an input overlaps an earlier one
  // where it starts below the furthest end seen so far, among the written inputs for any input,
  // among all inputs for a written one.
  struct Span {
    uintptr_t lo, hi;
    bool mutated;
  };
  std::vector<bool> mutated(inputs.size(), false);
  for (int32_t i : written)
    if (i >= 0 && static_cast<size_t>(i) < inputs.size()) mutated[static_cast<size_t>(i)] = true;
  std::vector<Span> spans;
  spans.reserve(inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (!inputs[j].defined() || inputs[j].numel() == 0) continue;
    const auto [lo, hi] = extent(inputs[j]);
    spans.push_back({lo, hi, mutated[j]});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  uintptr_t end_all = 0, end_mutated = 0;
  for (const Span& s : spans) {
    if (s.lo < (s.mutated ? end_all : end_mutated)) return true;
    end_all = std::max(end_all, s.hi);
    if (s.mutated) end_mutated = std::max(end_mutated, s.hi);
  }
  return false;
}

}  // namespace fastdyn::runtime
