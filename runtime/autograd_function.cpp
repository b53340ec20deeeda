// runtime/autograd_function.cpp — see autograd_function.h.
#include "runtime/autograd_function.h"

#include "runtime/errors.h"
#include "runtime/program_executable.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>

namespace fastdyn::runtime {
namespace {

namespace ag = torch::autograd;
// torch 2.11 holds nodes by std::shared_ptr, later releases by c10::intrusive_ptr.
using NodePtr = decltype(std::declval<ag::Edge>().function);

// What a watched replay input that died is replayed as (CompiledFunctionBackward): a tensor of
// its shape and options. The same for every call of one executable (its guards hold sizes, dtype
// and device), so noted once per level, from the first call's tensors.
struct StandIn {
  std::vector<int64_t> sizes;
  at::TensorOptions options;
  bool requires_grad = false;
};

struct Compiled {
  ExecutablePtr forward;
  std::vector<LevelExecutables> levels;
  AutogradPlan plan;
  ExecutablePtr aliased;  // the traced graph on ATen (plan.written_inputs)
  // Per level, per replay input (set for the watched ones): noted by the level's first node.
  mutable std::vector<std::vector<StandIn>> stand_ins;
  mutable std::vector<std::once_flag> stand_ins_noted;
};

struct OutputMeta {  // a level output's shape and options, for the zeros of a gradient that never came
  std::vector<int64_t> sizes;
  at::TensorOptions options;
};

class CompiledFunctionBackward final : public ag::Node {
 public:
  // `inputs`: the graph's inputs, the lower levels' outputs, then the dropout masks of the call
  // (differentiable_backward's).
  CompiledFunctionBackward(std::shared_ptr<const Compiled> c, size_t level, std::vector<at::Tensor> inputs)
      : c_(std::move(c)), level_(level), inputs_(std::move(inputs)) {
    for (const at::Tensor& t : inputs_) versions_.push_back(t.defined() ? t._version() : 0);
    // The replay inputs whose values the backward never reads are watched, not kept (plan's
    // replay_reads): they die when eager's would.
    const std::vector<bool>& reads = c_->plan.levels[level_].replay_reads;
    std::call_once(c_->stand_ins_noted[level_], [&] {
      std::vector<StandIn>& s = c_->stand_ins[level_];
      s.resize(inputs_.size());
      for (size_t i = 0; i < inputs_.size() && i < reads.size(); ++i)
        if (!reads[i] && inputs_[i].defined()) s[i] = {inputs_[i].sizes().vec(), inputs_[i].options(), inputs_[i].requires_grad()};
    });
    for (size_t i = 0; i < inputs_.size() && i < reads.size(); ++i) {
      if (reads[i] || !inputs_[i].defined()) continue;
      if (watched_.empty()) watched_.resize(inputs_.size());
      watched_[i] = WeakTensor(inputs_[i].getIntrusivePtr());
      inputs_[i] = at::Tensor();
    }
  }
  std::string name() const override { return "CompiledFunctionBackward"; }

  void save(std::vector<ag::SavedVariable> saved, std::vector<OutputMeta> outs) {
    saved_ = std::move(saved);
    out_meta_ = std::move(outs);
  }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (ag::SavedVariable& s : saved_) s.reset_data();
    inputs_.clear();
    watched_.clear();
    released_ = true;
  }

  ag::variable_list apply(ag::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (at::GradMode::is_enabled()) return differentiable_backward(grads);
    std::vector<at::Tensor> args;
    args.reserve(saved_.size() + grads.size());
    for (const ag::SavedVariable& s : saved_) args.push_back(s.unpack());  // eager's errors
    for (size_t k = 0; k < grads.size(); ++k) args.push_back(seed(grads[k], k));
    Executable& backward = *c_->levels[level_].backward;
    // Without retain_graph the engine releases the saved values after this call: they are given
    // to the backward instead, which drops each after its last reader, so the activations are
    // freed as the backward walks down the layers, as eager's nodes free theirs (one node holding
    // them all to the end had the step's peak memory above eager's).
    if (!ag::get_current_graph_task_keep_graph()) {
      for (ag::SavedVariable& s : saved_) s.reset_data();
      grads.clear();
      return edge_gradients(backward.run_taking(std::move(args)));
    }
    return edge_gradients(backward.run(args));
  }

 private:
  ag::variable_list edge_gradients(std::vector<at::Tensor> outs) const {
    const AutogradPlan::Level& lv = c_->plan.levels[level_];
    ag::variable_list result;  // one per next edge: the plan's edges that get a gradient
    for (int32_t g : lv.edge_grad)
      if (g >= 0) result.push_back(std::move(outs.at(static_cast<size_t>(g))));
    return result;
  }

  // The gradient the compiled backward reads for level output k: contiguous, of the output's dtype.
  at::Tensor seed(const at::Tensor& g, size_t k) const {
    const OutputMeta& m = out_meta_.at(k);
    if (!g.defined()) return at::zeros(m.sizes, m.options);
    at::Tensor r = g.scalar_type() == m.options.dtype().toScalarType() ? g : g.to(m.options.dtype());
    return r.contiguous();
  }

  // create_graph=True: the traced graph replayed on ATen from the kept inputs, and differentiated.
  ag::variable_list differentiable_backward(const ag::variable_list& grads) {
    const AutogradPlan::Level& lv = c_->plan.levels[level_];
    TORCH_CHECK(!released_,
                "Trying to backward through the graph a second time (or directly access saved tensors after they "
                "have already been freed). Saved intermediate values of the graph are freed when you call "
                ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                "graph a second time or if you need to access saved tensors after calling backward.");
    for (size_t i = 0; i < inputs_.size(); ++i)
      TORCH_CHECK(!inputs_[i].defined() || inputs_[i]._version() == versions_[i],
                  "one of the variables needed for gradient computation has been modified by an inplace "
                  "operation: input ", i, " of the compiled graph is at version ", inputs_[i]._version(),
                  "; expected version ", versions_[i], " instead.");
    std::vector<at::Tensor> replay_inputs = inputs_;
    for (size_t i = 0; i < watched_.size(); ++i) {
      if (!watched_[i]) continue;
      if (c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> alive = watched_[i]->lock()) {
        replay_inputs[i] = at::Tensor(std::move(alive));
      } else {
        // Freed, as eager's would be: the backward reads nothing computed from it, so a tensor of
        // its shape stands in (a leaf where it gets a gradient, so the gradient still comes out).
        const StandIn& w = c_->stand_ins.at(level_).at(i);
        replay_inputs[i] = at::zeros(w.sizes, w.options).requires_grad_(w.requires_grad);
      }
    }
    std::vector<at::Tensor> outs = c_->levels[level_].eager->run(replay_inputs);
    ag::variable_list ys, gys, xs;
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!grads[k].defined()) continue;
      ys.push_back(outs[k]);
      gys.push_back(grads[k]);
    }
    for (size_t e = 0; e < lv.edge_inputs.size(); ++e)
      if (lv.edge_grad[e] >= 0) xs.push_back(replay_inputs.at(static_cast<size_t>(lv.edge_inputs[e])));
    const size_t num_inputs = replay_inputs.size() - lv.edge_outputs.size() - lv.eager_saved.size();
    for (size_t k = 0; k < lv.edge_outputs.size(); ++k)
      if (lv.edge_grad[lv.edge_inputs.size() + k] >= 0) xs.push_back(replay_inputs.at(num_inputs + k));
    if (ys.empty()) return ag::variable_list(xs.size());
    return ag::grad(ys, xs, gys, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
  }

  using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

  std::shared_ptr<const Compiled> c_;
  size_t level_;
  std::vector<at::Tensor> inputs_;  // what the replay reads by value (the watched ones undefined)
  std::vector<std::optional<WeakTensor>> watched_;  // per input: watched instead of kept (empty: none)
  std::vector<uint32_t> versions_;
  std::vector<ag::SavedVariable> saved_;
  std::vector<OutputMeta> out_meta_;
  bool released_ = false;
};

// T is a template parameter so that only the branch of this torch's pointer type is instantiated.
template <class P = NodePtr, class T = CompiledFunctionBackward>
P make_node(std::shared_ptr<const Compiled> c, size_t level, std::vector<at::Tensor> inputs) {
  if constexpr (std::is_same_v<P, std::shared_ptr<ag::Node>>)
    return P(new T(std::move(c), level, std::move(inputs)));
  else
    return c10::make_intrusive<T>(std::move(c), level, std::move(inputs));
}

class AutogradExecutable final : public Executable {
 public:
  explicit AutogradExecutable(std::shared_ptr<const Compiled> c) : c_(std::move(c)) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    const AutogradPlan& plan = c_->plan;
    if (c_->aliased && overlaps_a_written_input(inputs, plan.written_inputs)) return c_->aliased->run(inputs);
    std::vector<at::Tensor> all;
    {
      at::AutoGradMode no_grad(false);  // the compiled forward records nothing; the nodes below do
      all = c_->forward->run(inputs);
    }
    std::vector<at::Tensor> outs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(plan.num_outputs));
    // The nodes are made in grad mode whatever the mode at the call: the trace decided that these
    // outputs require grad in the mode their ops were recorded in, which a continuation that
    // resumed inside `with torch.no_grad():` and left it before them does not share with its
    // first instruction, where the graph is called (difftest seed 26888: `x * w` after the block
    // came out without a grad_fn).
    at::AutoGradMode grad_on(true);
    size_t next_view = 0;
    for (size_t L = 0; L < plan.levels.size(); ++L) {
      make_views(outs, inputs, next_view, static_cast<int32_t>(L));
      const AutogradPlan::Level& lv = plan.levels[L];
      // Next edges only to what gets a gradient, as eager's nodes have: an input that requires
      // grad but that no output depends on gets none, so that a backward from these outputs never
      // runs the node that made it (which would check its saved values: difftest seed 36176, an
      // input written in place after an unrelated product that saved it).
      std::vector<at::Tensor> edges, kept = inputs;
      for (size_t i = 0; i < kept.size() && i < plan.input_used.size(); ++i)
        if (!plan.input_used[i]) kept[i] = at::Tensor();
      for (size_t e = 0; e < lv.edge_inputs.size(); ++e)
        if (lv.edge_grad[e] >= 0) edges.push_back(inputs.at(static_cast<size_t>(lv.edge_inputs[e])));
      for (size_t k = 0; k < lv.edge_outputs.size(); ++k) {
        const at::Tensor& o = outs.at(static_cast<size_t>(lv.edge_outputs[k]));
        if (lv.edge_grad[lv.edge_inputs.size() + k] >= 0) edges.push_back(o);
        kept.push_back(o);
      }
      for (int32_t k : lv.eager_saved) kept.push_back(all.at(plan.num_outputs + static_cast<size_t>(k)));
      NodePtr node = make_node(c_, L, std::move(kept));
      node->set_next_edges(ag::collect_next_edges(edges));
      std::vector<OutputMeta> metas;
      for (int32_t p : lv.outputs) {
        at::Tensor& o = outs.at(static_cast<size_t>(p));
        // A view of a buffer made outside grad mode would refuse in-place updates that eager's
        // output takes: the output gets its own autograd identity.
        if (o.is_view()) o = o.detach();
        metas.push_back({o.sizes().vec(), o.options()});
        ag::create_gradient_edge(o, node);
      }
      std::vector<ag::SavedVariable> saved;
      saved.reserve(lv.saved.size());
      for (int32_t k : lv.saved) {  // inputs (leaves or not) are saved as they are, like eager's
        const at::Tensor& value = all.at(plan.num_outputs + static_cast<size_t>(k));
        // A value the forward wrote into an input: that input itself where it has the value's
        // layout (the backward reads it with the value's strides), so that eager's version check
        // sees a later in-place write to it.
        const int32_t into = k < static_cast<int32_t>(plan.saved_input.size()) ? plan.saved_input[static_cast<size_t>(k)] : -1;
        const at::Tensor* in = into >= 0 ? &inputs.at(static_cast<size_t>(into)) : nullptr;
        const bool as_input = in && in->defined() && value.defined() && in->sizes() == value.sizes() &&
                              in->strides() == value.strides() && in->scalar_type() == value.scalar_type();
        const at::Tensor& t = as_input ? *in : value;
        saved.emplace_back(plan.saved_detached[static_cast<size_t>(k)] && t.defined() ? t.detach() : t, false);
      }
      static_cast<CompiledFunctionBackward&>(*node).save(std::move(saved), std::move(metas));
    }
    make_views(outs, inputs, next_view, INT32_MAX);
    // The other views among the outputs of tensors that need no grad (x[1:, 1] of an input) were
    // made by the forward, under no_grad: eager makes them in grad mode, where an in-place update
    // with a value that requires grad is allowed (difftest seed 36564: `x[1:, 1] += t[0, 0]` after
    // the break). (A view of a base that requires grad is the plan's, or one the frame made under
    // no_grad, which stays so.)
    for (at::Tensor& o : outs)
      if (o.defined() && o.is_view() && !o.requires_grad()) {
        const at::Tensor base(o._base());
        if (!base.requires_grad()) o = base.as_strided(o.sizes(), o.strides(), o.storage_offset());
      }
    for (size_t p = 0; p < outs.size(); ++p)
      if (plan.output_first[p] != static_cast<int32_t>(p)) outs[p] = outs[static_cast<size_t>(plan.output_first[p])];
    return outs;
  }

  // Makes plan.views[next..] whose level is below `below` again as views of their bases, in grad
  // mode (their bases are wired by then).
  void make_views(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& inputs, size_t& next,
                  int32_t below) const {
    const std::vector<AutogradPlan::View>& views = c_->plan.views;
    for (; next < views.size() && views[next].level < below; ++next) {
      const AutogradPlan::View& view = views[next];
      at::Tensor& t = outs.at(static_cast<size_t>(view.position));
      const at::Tensor& base =
          view.of_input ? inputs.at(static_cast<size_t>(view.base)) : outs.at(static_cast<size_t>(view.base));
      if (!t.is_alias_of(base)) throw InternalError("autograd: a view output does not share its base's memory");
      t = base.as_strided(t.sizes(), t.strides(), t.storage_offset());
    }
  }

  std::string describe() const override {
    std::string s = "autograd: forward and " + std::to_string(c_->levels.size()) + " backward(s) compiled\n--- forward ---\n" +
                    c_->forward->describe();
    for (size_t L = 0; L < c_->levels.size(); ++L)
      s += "\n--- backward " + std::to_string(L) + " ---\n" + c_->levels[L].backward->describe();
    return s;
  }
  bool settled() const override {
    bool all = c_->forward->settled();
    for (const LevelExecutables& l : c_->levels) all = all && l.backward->settled();
    return all;
  }

 private:
  std::shared_ptr<const Compiled> c_;
};

}  // namespace

ExecutablePtr make_autograd_executable(ExecutablePtr forward, std::vector<LevelExecutables> levels, AutogradPlan plan,
                                       ExecutablePtr aliased) {
  if (!plan.written_inputs.empty() && !aliased) throw InternalError("autograd plan: written inputs without the aliased fallback");
  if (levels.size() != plan.levels.size() || plan.output_first.size() != plan.num_outputs)
    throw InternalError("autograd plan: inconsistent sizes");
  for (const AutogradPlan::Level& lv : plan.levels)
    if (lv.edge_grad.size() != lv.edge_inputs.size() + lv.edge_outputs.size())
      throw InternalError("autograd plan: a level's edges and gradients differ in number");
  auto c = std::make_shared<Compiled>();
  c->forward = std::move(forward);
  c->levels = std::move(levels);
  c->plan = std::move(plan);
  c->aliased = std::move(aliased);
  c->stand_ins.resize(c->plan.levels.size());
  c->stand_ins_noted = std::vector<std::once_flag>(c->plan.levels.size());
  return std::make_shared<AutogradExecutable>(std::move(c));
}

}  // namespace fastdyn::runtime
