// codegen/aten/prepacked_linear.cpp — compile_prepacked_linear (see prepacked_linear.h).
#include "codegen/aten/prepacked_linear.h"

#include "codegen/aten/held_weight.h"
#include "codegen/aten/onednn_ops.h"

#include <ATen/ATen.h>

#include <optional>

namespace fastdyn::codegen {
namespace {

using LinearFn = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            c10::List<std::optional<c10::Scalar>>, std::optional<c10::string_view>);
using ReorderFn = at::Tensor(const at::Tensor&, std::optional<int64_t>);

using OneDnnOps = OneDnnPair<LinearFn, ReorderFn>;

// nullopt when torch was built without oneDNN's linear ops.
const std::optional<OneDnnOps>& onednn_ops() {
  static const auto ops = find_onednn_pair<LinearFn, ReorderFn>("mkldnn::_linear_pointwise", "mkldnn::_reorder_linear_weight");
  return ops;
}

class PrepackedLinear final : public runtime::Executable {
 public:
  // Where x, the weight and the bias (-1: none) sit among the inputs; `transposed`: the weight
  // input is [in, out] (addmm's mat2), linear's transpose.
  struct Layout {
    int x = 0, w = 1, b = -1;
    bool transposed = false;
  };

  PrepackedLinear(const OneDnnOps& ops, int64_t rows, Layout at) : ops_(ops), rows_(rows), at_(at) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& in) override {
    const at::Tensor& x = in.at(static_cast<size_t>(at_.x));
    const at::Tensor w = at_.transposed ? in.at(static_cast<size_t>(at_.w)).t() : in.at(static_cast<size_t>(at_.w));
    std::optional<at::Tensor> b;
    if (at_.b >= 0) b = in.at(static_cast<size_t>(at_.b));
    const at::Tensor& held = in.at(static_cast<size_t>(at_.w));
    if (!x.is_contiguous() || !held.is_contiguous() || held.scalar_type() != at::kFloat) return {at::linear(x, w, b)};
    const at::Tensor packed = held_.get(held, [&] { return ops_.reorder.call(w.contiguous(), rows_); });
    if (!packed.defined()) return {at::linear(x, w, b)};
    return {ops_.run.call(x, packed, b, "none", c10::List<std::optional<c10::Scalar>>(), std::nullopt)};
  }

  std::string describe() const override { return "oneDNN linear, weight reordered once"; }

 private:
  OneDnnOps ops_;
  int64_t rows_;
  Layout at_;
  HeldWeight held_;
};

}  // namespace

runtime::ExecutablePtr compile_prepacked_linear(const Graph& g, const Node& n) {
  if (!held_weights_enabled()) return nullptr;
  // linear(x, w[out, in], b?) or addmm(b, x, w[in, out], beta=1, alpha=1) (GPT-2's Conv1D).
  const bool addmm = n.op == OpId::addmm;
  if (n.op != OpId::linear && !addmm) return nullptr;
  if (n.args.size() != (addmm ? 5u : 3u)) return nullptr;
  auto is_one = [](const Arg& a) {
    return (a.kind == Arg::Kind::Int && a.i == 1) || (a.kind == Arg::Kind::Double && a.d == 1.0);
  };
  if (addmm && !(is_one(n.args[3]) && is_one(n.args[4]))) return nullptr;
  const Arg& xa = n.args[addmm ? 1 : 0];
  const Arg& wa = n.args[addmm ? 2 : 1];
  const Arg& ba = n.args[addmm ? 0 : 2];
  if (xa.kind != Arg::Kind::Value || wa.kind != Arg::Kind::Value || xa.value == wa.value) return nullptr;
  const bool has_bias = ba.kind == Arg::Kind::Value;
  const TensorMeta& x = g.meta(xa.value);
  const TensorMeta& w = g.meta(wa.value);
  const int64_t out = w.sizes.size() == 2 ? w.sizes[addmm ? 1 : 0] : -1;
  const int64_t in = w.sizes.size() == 2 ? w.sizes[addmm ? 0 : 1] : -1;
  if (x.dtype != c10::ScalarType::Float || w.dtype != c10::ScalarType::Float || !x.device.is_cpu() ||
      w.dim() != 2 || x.dim() < 2 || (addmm && x.dim() != 2) || x.sizes.back() != in)
    return nullptr;
  // NB: parameters require grad; under no_grad the result does not, and nothing records autograd.
  if (g.meta(n.outputs.at(0)).requires_grad) return nullptr;
  if (has_bias) {
    const TensorMeta& b = g.meta(ba.value);
    if (b.dtype != c10::ScalarType::Float || b.sizes != std::vector<int64_t>{out} || ba.value == xa.value || ba.value == wa.value)
      return nullptr;
  }
  const int64_t rows = x.numel() / std::max<int64_t>(in, 1);
  if (rows * out * in < kMinPrepackMacs) return nullptr;
  const auto& ops = onednn_ops();
  if (!ops) return nullptr;
  // Inputs come in argument order, each value once (the llvm backend's extern convention).
  PrepackedLinear::Layout at;
  at.transposed = addmm;
  if (addmm) {
    at.b = has_bias ? 0 : -1;
    at.x = has_bias ? 1 : 0;
    at.w = at.x + 1;
  } else {
    at.b = has_bias ? 2 : -1;
  }
  return std::make_shared<PrepackedLinear>(*ops, rows, at);
}

}  // namespace fastdyn::codegen
