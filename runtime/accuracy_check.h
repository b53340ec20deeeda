// runtime/accuracy_check.h — accuracy mode (FASTDYN_CHECK=1, fastdyn._C.set_check): each compiled
// program's kernels are compared, as they run, with the program's graph run op by op on ATen
// (runtime/ layer).
//
// A program built while the mode is on carries a CheckPlan (codegen/loop/check_plan.h fills it):
// per kernel step the graph values it stores, and one reference executable computing all of them
// on ATen. On each call while the mode is on, ProgramExecutable runs a CheckedCall: the reference
// runs twice before the steps, in float64 (the reference proper) and at the program's own dtypes
// (eager: how far ATen itself is from float64), then each kernel's values are compared right after
// it ran. The first kernel of the call that diverges is recorded (divergences(), and a "check"
// event in the report's journal) with the call's inputs, and the call goes on: the mode observes,
// it never changes a result. Programs built while the mode is off carry no plan: their executor
// tests one null pointer per call, and is never checked.
//
// Tolerance (compare_values): element i of a floating value passes when
//   |got_i - ref_i| <= atol + rtol * |ref_i|,  rtol = the dtype's, atol = max(the dtype's, 4 * max_j |eager_j - ref_j|)
// ref being the float64 run: never tighter than the dtype allows, nor than eager's own error (a
// long reduction, or a float16 graph whose every op rounds). Where eager is NaN or infinite, got
// must be the same NaN or infinity; where eager is finite, got must be too. Integers and bools
// must equal eager exactly.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/executable.h"
#include "runtime/program.h"

namespace fastdyn::runtime {

namespace check_detail {
extern std::atomic<bool> g_enabled;
}
// FASTDYN_CHECK (1/on/true/yes, 0/off/false/no), read once at load, until set_check_enabled.
inline bool check_enabled() { return check_detail::g_enabled.load(std::memory_order_relaxed); }
void set_check_enabled(bool on);

// One graph value a kernel stores, checked after the last kernel that stores it: its id, where it
// is in the slots then, and its position among the reference's outputs.
struct CheckedValue {
  int32_t value = -1;
  SlotTensor where;
  int32_t reference = -1;
  std::string writers;  // for a detail, when several kernels store it: "v5 is stored by k0, k1"
};

// What a program's steps compute, for comparison. steps[i] is step i's kernel (name empty: an
// extern call, which is ATen already and not compared).
struct CheckPlan {
  struct Kernel {
    std::string name;
    std::vector<CheckedValue> values;
  };
  std::vector<Kernel> steps;
  std::vector<int32_t> input_slots;  // every graph input's slot: the caller's inputs, then constants
  ExecutablePtr reference;           // the graph on ATen; its outputs are the checked values
  int32_t journal_graph = -1;        // journal::current() when the program was built
};

struct Tolerance {
  double atol = 0.0, rtol = 0.0;  // both 0: exact
};
Tolerance dtype_tolerance(c10::ScalarType dtype);

struct Comparison {
  bool ok = true;
  double max_abs_err = 0.0, max_rel_err = 0.0;  // rel: over elements whose reference is not 0
  Tolerance tol;
  std::string detail;  // when not ok: the first failing element, e.g. "at [2, 3]: got 1.5, expected 0.5"
};
// `got` against `reference` (the float64 run, or when there is none, the run at got's dtypes) and
// `eager` (the run at the program's dtypes; undefined: none, reference is eager). The rule is the
// header's.
Comparison compare_values(const at::Tensor& got, const at::Tensor& reference, const at::Tensor& eager);

struct Divergence {
  int64_t id = 0;     // the journal event's inputs_id
  std::string label;  // the graph's function (CheckLabel), "" when unknown
  std::string kernel;
  int32_t value = -1;  // the graph value id (v5 in explain's program text)
  std::string dtype;
  double max_abs_err = 0.0, max_rel_err = 0.0, atol = 0.0, rtol = 0.0;
  std::string detail;
  int32_t graph = -1;  // journal graph id
  std::vector<at::Tensor> inputs;  // clones of the call's inputs, as they were before it ran
};
constexpr size_t kMaxDivergences = 100;  // later ones are journaled, not kept
std::vector<Divergence> divergences();
void clear_divergences();  // and checked_graphs()
int64_t checked_graphs();  // program calls checked since the last clear

// Names the graph calls this thread makes while it lives (CompiledGraph: the function's
// qualname), for divergences' labels. Nothing when the mode is off.
class CheckLabel {
 public:
  explicit CheckLabel(const std::string& name) {
    if (check_enabled()) [[unlikely]]
      enter(name);
  }
  ~CheckLabel() {
    if (entered_) [[unlikely]]
      leave();
  }
  CheckLabel(const CheckLabel&) = delete;
  CheckLabel& operator=(const CheckLabel&) = delete;

 private:
  void enter(const std::string& name);
  void leave();
  bool entered_ = false;
  const std::string* previous_ = nullptr;
};

// Tests: while set, checked calls add 1 to the first element of the first value each kernel of
// this name checks (a bool is negated), right after it ran — a wrong kernel. "" clears it.
void set_corrupt_kernel_for_testing(std::string name);

// One checked call of a program (the executor's): construct it once inputs and constants are in
// their slots, call after_step after each step, before any slot is released.
class CheckedCall {
 public:
  CheckedCall(const CheckPlan& plan, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& slots);
  void after_step(size_t step, const std::vector<at::Tensor>& slots);

 private:
  const CheckPlan& plan_;
  std::vector<at::Tensor> inputs_;             // the caller's, cloned
  std::vector<at::Tensor> reference_, eager_;  // per checked value; reference_ empty: no reference ran
  std::string reference_note_;                 // how the reference ran, for the detail
  std::string corrupt_;
  bool done_ = false;                          // a kernel diverged (or no reference): compare no more
};

}  // namespace fastdyn::runtime
