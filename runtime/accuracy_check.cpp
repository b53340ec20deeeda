// runtime/accuracy_check.cpp — see accuracy_check.h.
#include "runtime/accuracy_check.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "runtime/env_flag.h"
#include "runtime/format.h"
#include "runtime/journal.h"

namespace fastdyn::runtime {
namespace {

bool env_check() {
  const char* v = std::getenv("FASTDYN_CHECK");
  if (!v || !*v) return false;
  std::string s(v);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "1" || s == "on" || s == "true" || s == "yes") return true;
  if (!is_off_word(s))
    std::fprintf(stderr, "fastdyn: FASTDYN_CHECK=%s is none of 1/on/true/yes/0/off/false/no: accuracy mode stays off\n", v);
  return false;
}

struct State {
  std::mutex mu;
  std::vector<Divergence> kept;
  int64_t next_id = 0;
  int64_t checked = 0;
  std::string corrupt;  // set_corrupt_kernel_for_testing
};

State& state() {
  static State* s = new State();  // never destroyed: a call may finish during exit
  return *s;
}

thread_local const std::string* t_label = nullptr;

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::string index_text(int64_t flat, c10::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return int_list_str(index);
}

// The wrong kernel of set_corrupt_kernel_for_testing: its first element, changed in the slot.
void corrupt(const at::Tensor& t) {
  if (t.numel() == 0) return;
  at::Tensor first = t;
  while (first.dim() > 0) first = first.select(0, 0);
  if (first.scalar_type() == at::kBool) first.logical_not_();
  else first.add_(1);
}

void record(const CheckPlan& plan, const std::string& kernel, const CheckedValue& v, const at::Tensor& got,
            const Comparison& c, const std::vector<at::Tensor>& inputs) {
  Divergence d;
  d.label = t_label ? *t_label : "";
  d.kernel = kernel;
  d.value = v.value;
  d.dtype = std::string(c10::getDtypeNames(got.scalar_type()).first);  // torch's: "float32"
  d.max_abs_err = c.max_abs_err;
  d.max_rel_err = c.max_rel_err;
  d.atol = c.tol.atol;
  d.rtol = c.tol.rtol;
  d.detail = c.detail;
  d.graph = plan.journal_graph;
  bool kept = false;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    d.id = s.next_id++;
    if (s.kept.size() < kMaxDivergences) {
      d.inputs = inputs;
      s.kept.push_back(d);
      kept = true;
    }
  }
  if (!journal::on()) return;
  journal::Event e;
  e.graph = plan.journal_graph;
  e.kind = "check";
  e.fields = {{"label", d.label},
              {"kernel", d.kernel},
              {"value", std::to_string(d.value)},
              {"dtype", d.dtype},
              {"max_abs_err", number(d.max_abs_err)},
              {"max_rel_err", number(d.max_rel_err)},
              {"atol", number(d.atol)},
              {"rtol", number(d.rtol)},
              {"detail", d.detail},
              {"inputs_id", kept ? std::to_string(d.id) : ""}};
  journal::add(std::move(e));
}

}  // namespace

namespace check_detail {
std::atomic<bool> g_enabled{env_check()};
}

void set_check_enabled(bool on) { check_detail::g_enabled.store(on); }

Tolerance dtype_tolerance(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return {1e-9, 1e-7};
    case at::kFloat: return {1e-5, 1e-4};
    case at::kHalf: return {1e-3, 1e-2};
    case at::kBFloat16: return {2e-3, 2e-2};
    default: return at::isFloatingType(dtype) ? Tolerance{1e-2, 1e-1} : Tolerance{};  // float8: 2-3 mantissa bits
  }
}

Comparison compare_values(const at::Tensor& got, const at::Tensor& reference, const at::Tensor& eager) {
  Comparison c;
  c.tol = dtype_tolerance(got.scalar_type());
  const at::Tensor& own = eager.defined() ? eager : reference;  // at the program's dtypes
  if (got.sizes() != reference.sizes() || got.sizes() != own.sizes()) {
    c.ok = false;
    c.max_abs_err = c.max_rel_err = std::numeric_limits<double>::infinity();
    c.detail = "sizes " + int_list_str(got.sizes().vec()) + ", reference's " + int_list_str(reference.sizes().vec());
    return c;
  }
  if (got.numel() == 0) return c;
  const at::Tensor g = got.to(at::kDouble), e = own.to(at::kDouble);
  at::Tensor r, err, bad, finite;
  if (c.tol.rtol == 0.0) {  // integers and bools: exactly eager's, compared in their own type
    r = e;
    err = (g - r).abs();
    bad = got.ne(own.to(got.scalar_type()));
    finite = at::ones_like(bad);
  } else {
    r = reference.to(at::kDouble);
    finite = at::isfinite(g) & at::isfinite(e);
    r = at::where(at::isfinite(r), r, e);  // float64 itself overflowed: eager's is the reference
    err = at::where(finite, (g - r).abs(), 0.0);
    if (eager.defined()) c.tol.atol = std::max(c.tol.atol, 4.0 * at::where(finite, (e - r).abs(), 0.0).max().item<double>());
    const at::Tensor same_special = g.eq(e) | (at::isnan(g) & at::isnan(e));
    bad = at::where(finite, err > c.tol.atol + c.tol.rtol * r.abs(), ~same_special);
  }
  c.max_abs_err = err.max().item<double>();
  c.max_rel_err = at::where(finite & r.ne(0), err / r.abs(), 0.0).max().item<double>();
  const at::Tensor flat_bad = bad.reshape(-1);
  if (!flat_bad.any().item<bool>()) return c;
  c.ok = false;
  const int64_t i = flat_bad.to(at::kByte).argmax().item<int64_t>();  // the first (argmax's documented tie rule)
  const bool special = !finite.reshape(-1)[i].item<bool>();
  if (special) c.max_abs_err = c.max_rel_err = std::numeric_limits<double>::infinity();
  c.detail = "at " + index_text(i, got.sizes()) + ": got " + number(g.reshape(-1)[i].item<double>()) + ", expected " +
             number((special ? e : r).reshape(-1)[i].item<double>());
  return c;
}

std::vector<Divergence> divergences() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.kept;
}

void clear_divergences() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.kept.clear();
  s.checked = 0;
}

int64_t checked_graphs() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.checked;
}

void CheckLabel::enter(const std::string& name) {
  entered_ = true;
  previous_ = t_label;
  t_label = &name;
}

void CheckLabel::leave() { t_label = previous_; }

void set_corrupt_kernel_for_testing(std::string name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.corrupt = std::move(name);
}

CheckedCall::CheckedCall(const CheckPlan& plan, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& slots)
    : plan_(plan) {
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    corrupt_ = s.corrupt;
    ++s.checked;
  }
  c10::NoGradGuard no_grad;
  // The caller's inputs are cloned: kernels that write inputs back would change them before a
  // divergence is recorded. The reference's graph is functional (codegen/loop/functionalize.cpp):
  // it writes none of its inputs, the program's constants included.
  std::vector<at::Tensor> own, wide;
  for (size_t i = 0; i < plan.input_slots.size(); ++i) {
    at::Tensor t = i < inputs.size() ? inputs[i] : slots[static_cast<size_t>(plan.input_slots[i])];
    if (i < inputs.size() && t.defined()) t = t.clone();
    own.push_back(t);
    wide.push_back(t.defined() && t.is_floating_point() ? t.to(at::kDouble) : t);
  }
  inputs_.assign(own.begin(), own.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  try {
    eager_ = plan.reference->run(own);
  } catch (const std::exception&) {
    done_ = true;  // the graph fails on ATen at its own dtypes: nothing to compare with
    return;
  }
  try {
    reference_ = plan.reference->run(wide);
  } catch (const std::exception& e) {
    // An op without a float64 kernel, or one that insists on its inputs' dtypes.
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    reference_note_ = "reference at the program's dtypes: float64 failed: " + why;
    reference_ = std::move(eager_);
    eager_.clear();
  }
}

void CheckedCall::after_step(size_t step, const std::vector<at::Tensor>& slots) {
  const CheckPlan::Kernel& k = plan_.steps[step];
  if (k.values.empty()) return;
  c10::NoGradGuard no_grad;
  if (!corrupt_.empty() && k.name == corrupt_) corrupt(slot_view(k.values[0].where, slots));
  if (done_) return;
  try {
    for (const CheckedValue& v : k.values) {
      const at::Tensor got = slot_view(v.where, slots);
      const size_t r = static_cast<size_t>(v.reference);
      Comparison c = compare_values(got, reference_.at(r), eager_.empty() ? at::Tensor() : eager_.at(r));
      if (c.ok) continue;
      if (!v.writers.empty()) c.detail += " (" + v.writers + ")";
      if (!reference_note_.empty()) c.detail += " (" + reference_note_ + ")";
      record(plan_, k.name, v, got, c, inputs_);
      done_ = true;
      return;
    }
  } catch (const std::exception& e) {
    // The mode observes: a value it cannot compare (an odd dtype) costs the check, not the call.
    std::fprintf(stderr, "fastdyn: accuracy check of kernel %s stopped: %s\n", k.name.c_str(), e.what());
    done_ = true;
  }
}

}  // namespace fastdyn::runtime
