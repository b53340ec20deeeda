// codegen/aten/channels_last_conv.cpp — compile_channels_last_conv (see channels_last_conv.h).
#include "codegen/aten/channels_last_conv.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>

#include "codegen/aten/held_weight.h"
#include "codegen/aten/onednn_ops.h"
#include "codegen/capture/meta_rules.h"

namespace fastdyn::codegen {
namespace {

using ConvFn = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef,
                          at::IntArrayRef, at::IntArrayRef, int64_t, c10::string_view,
                          c10::List<std::optional<c10::Scalar>>, std::optional<c10::string_view>);
using ReorderFn = at::Tensor(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t,
                             at::OptionalIntArrayRef);

// oneDNN's convolution on a weight reordered in advance (what inductor's CPU freezing uses), or
// nullopt when torch was built without it.
using OneDnnConv = OneDnnPair<ConvFn, ReorderFn>;
const std::optional<OneDnnConv>& onednn_conv() {
  static const auto ops =
      find_onednn_pair<ConvFn, ReorderFn>("mkldnn::_convolution_pointwise", "mkldnn::_reorder_convolution_weight");
  return ops;
}

class ChannelsLastConv final : public runtime::Executable {
 public:
  // conv2d's scalar arguments; `padding_mode` set: the conv2d.padding overload ("same"/"valid").
  struct Params {
    std::vector<int64_t> stride, padding, dilation, input_size;
    std::optional<std::string> padding_mode;
    int64_t groups = 1;
    bool bias = false;
  };
  ChannelsLastConv(Params p, std::optional<OneDnnConv> onednn) : p_(std::move(p)), onednn_(std::move(onednn)) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& in) override {
    const at::Tensor& x = in.at(0);
    const at::Tensor& w = in.at(1);
    std::optional<at::Tensor> b;
    if (p_.bias) b = in.at(2);
    at::Tensor held;
    if (w.is_contiguous() && w.scalar_type() == at::kFloat && w.device().is_cpu() && (!b || b->is_contiguous()))
      held = held_.get(w, [&] {
        return onednn_ ? onednn_->reorder.call(w, p_.padding, p_.stride, p_.dilation, p_.groups, p_.input_size)
                       : w.contiguous(at::MemoryFormat::ChannelsLast);
      });
    if (held.defined() && onednn_ && x.sizes() == c10::IntArrayRef(p_.input_size))
      return {onednn_->run.call(x, held, b, p_.padding, p_.stride, p_.dilation, p_.groups, "none",
                                 c10::List<std::optional<c10::Scalar>>(), std::nullopt)};
    const at::Tensor& weight = held.defined() && !onednn_ ? held : w;
    if (p_.padding_mode) return {at::conv2d(x, weight, b, p_.stride, *p_.padding_mode, p_.dilation, p_.groups)};
    return {at::conv2d(x, weight, b, p_.stride, p_.padding, p_.dilation, p_.groups)};
  }

  std::string describe() const override {
    return onednn_ ? "oneDNN conv2d, weight reordered once" : "conv2d, weight held in channels-last";
  }

 private:
  Params p_;
  std::optional<OneDnnConv> onednn_;  // nullopt: a channels-last copy of the weight, through ATen
  HeldWeight held_;
};

}  // namespace

runtime::ExecutablePtr compile_channels_last_conv(const Graph& g, const Node& n) {
  if (!held_weights_enabled()) return nullptr;
  const bool by_mode = n.op == OpId::conv2d_padding;
  if ((n.op != OpId::conv2d && !by_mode) || n.args.size() != 7) return nullptr;
  const Arg &xa = n.args[0], &wa = n.args[1], &ba = n.args[2];
  if (xa.kind != Arg::Kind::Value || wa.kind != Arg::Kind::Value || xa.value == wa.value) return nullptr;
  if (ba.kind != Arg::Kind::None && (ba.kind != Arg::Kind::Value || ba.value == xa.value || ba.value == wa.value)) return nullptr;
  const TensorMeta& x = g.meta(xa.value);
  const TensorMeta& w = g.meta(wa.value);
  if (x.dtype != c10::ScalarType::Float || w.dtype != c10::ScalarType::Float || !x.device.is_cpu() || w.dim() != 4 ||
      !is_channels_last_contiguous(x) || is_contiguous(x))
    return nullptr;
  // NB: parameters require grad; under no_grad the result does not, and nothing records autograd.
  if (g.meta(n.outputs.at(0)).requires_grad) return nullptr;
  ChannelsLastConv::Params p;
  p.bias = ba.kind == Arg::Kind::Value;
  if (n.args[3].kind != Arg::Kind::IntList || n.args[5].kind != Arg::Kind::IntList || n.args[6].kind != Arg::Kind::Int)
    return nullptr;
  p.stride = n.args[3].ints;
  p.dilation = n.args[5].ints;
  p.groups = n.args[6].i;
  if (by_mode) {
    if (n.args[4].kind != Arg::Kind::String) return nullptr;
    p.padding_mode = n.args[4].str;
  } else {
    if (n.args[4].kind != Arg::Kind::IntList) return nullptr;
    p.padding = n.args[4].ints;
  }
  p.input_size = x.sizes;
  // oneDNN's reordered weight needs explicit padding; "same"/"valid" convs hold a channels-last copy.
  std::optional<OneDnnConv> onednn;
  if (!by_mode) onednn = onednn_conv();
  return std::make_shared<ChannelsLastConv>(std::move(p), std::move(onednn));
}

}  // namespace fastdyn::codegen
