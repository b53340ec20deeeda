// codegen/passes/channels_last.cpp — see channels_last.h.
#include "codegen/passes/channels_last.h"

#include <c10/core/MemoryFormat.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>

#include "codegen/capture/meta_rules.h"

namespace fastdyn::codegen {
namespace {

// 2-d convolutions: the ops whose results this pass moves to channels-last.
constexpr std::array<OpId, 2> kConvs{OpId::conv2d, OpId::conv2d_padding};
// Besides the convolutions, the extern ops ATen runs on an NHWC input into an NHWC result (CPU and
// CUDA): 2-d pooling and upsampling. Everything lowered pointwise follows its inputs too (a
// kernel writes whatever strides its output's metadata gives).
constexpr std::array<OpId, 6> kFollowInput{OpId::max_pool2d,          OpId::avg_pool2d,
                                           OpId::adaptive_avg_pool2d, OpId::upsample_nearest2d,
                                           OpId::_upsample_nearest_exact2d, OpId::upsample_bilinear2d};

template <size_t N>
bool in(const std::array<OpId, N>& set, OpId op) {
  return std::find(set.begin(), set.end(), op) != set.end();
}

// A value worth moving: 4-d, floating, static sizes, laid out NCHW today (neither channels-last
// already nor ambiguous: with C == 1, or H == W == 1, the two layouts coincide).
bool nchw(const TensorMeta& m) {
  return m.dim() == 4 && !m.symbolic() && (m.dtype == c10::ScalarType::Float || m.dtype == c10::ScalarType::BFloat16 ||
                                           m.dtype == c10::ScalarType::Half) &&
         m.numel() > 0 && is_contiguous(m) && !is_channels_last_contiguous(m);
}

// An in-place op computed as its pointwise twin (relu_, add_, hardtanh_, ...) writes its result
// into its `self` argument's buffer: its output and that argument are one buffer, so they move
// together or not at all; the op itself reads and writes any layout, like its twin.
bool pointwise_in_place(const Node& n) {
  const OpInfo& info = op_info(n.op);
  return info.category == OpCategory::InPlace && info.lowering == Lowering::Twin && info.twin != OpId::NoTwin &&
         op_info(info.twin).lowering == Lowering::Pointwise && n.outputs.size() == 1 && !n.args.empty() &&
         n.args[0].kind == Arg::Kind::Value;
}

}  // namespace

Graph prefer_channels_last(const Graph& g) {
  const char* env = std::getenv("FASTDYN_CHANNELS_LAST");
  if (env && std::strcmp(env, "0") == 0) return g;
  // One conv alone gains nothing: the copy into NHWC and the kernel writing NCHW back for the
  // caller are the reorders ATen would have made around it. CPU graphs only, for now: on an H100
  // (bench/cnn.py, batch 32, fastdyn's ms per call, NCHW / NHWC) ResNet-18 ran 1.9 / 2.0 ms and the
  // MobileNet-style stack 0.8 / 0.8-0.9 ms: no gain yet (cuDNN converts the NCHW weights on
  // every call), where before the fused kernels walked their output's memory order it was a loss.
  if (std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
        return in(kConvs, n.op) && g.meta(n.outputs.at(0)).device.is_cpu();
      }) < 2)
    return g;
  // Values whose layout someone else relies on: the caller's (inputs, outputs), and those a view
  // or an in-place op reads or writes (their metadata was derived from these strides).
  std::vector<bool> fixed(g.values.size(), false);
  for (ValueId v : g.inputs) fixed[static_cast<size_t>(v)] = true;
  for (ValueId v : g.outputs) fixed[static_cast<size_t>(v)] = true;
  for (const Node& n : g.nodes) {
    const OpInfo& info = op_info(n.op);
    if (pointwise_in_place(n) ||
        (info.category != OpCategory::View && info.category != OpCategory::InPlace && info.lowering != Lowering::View))
      continue;
    for_each_value_input(n, [&](ValueId v) { fixed[static_cast<size_t>(v)] = true; });
    for (ValueId v : n.outputs) fixed[static_cast<size_t>(v)] = true;
  }
  // A pointwise in-place op's output and `self` are one buffer: either fixed fixes the other
  // (along chains such as relu_(add_(x, y)), until nothing changes).
  for (bool changed = true; changed;) {
    changed = false;
    for (const Node& n : g.nodes) {
      if (!pointwise_in_place(n)) continue;
      const size_t self = static_cast<size_t>(n.args[0].value), out = static_cast<size_t>(n.outputs[0]);
      if (fixed[self] != fixed[out]) fixed[self] = fixed[out] = changed = true;
    }
  }
  // Forward, in node order: a conv's result moves (its NCHW input gets a channels-last copy), and
  // so does every result computed pointwise or by a layout-following op from a moved value.
  std::vector<bool> moved(g.values.size(), false);
  std::map<ValueId, ValueId> copy_of;           // NCHW conv input -> its channels-last copy
  std::vector<std::pair<size_t, ValueId>> copies;  // (before node, input)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.size() != 1) continue;
    const ValueId out = n.outputs[0];
    if (fixed[static_cast<size_t>(out)] || !nchw(g.meta(out))) continue;
    if (in(kConvs, n.op)) {
      const ValueId x = n.args.at(0).value;
      if (!moved[static_cast<size_t>(x)]) {
        if (!nchw(g.meta(x))) continue;  // ATen would not see a channels-last input
        if (copy_of.emplace(x, -1).second) copies.emplace_back(i, x);  // the copy's id comes below
      }
      moved[static_cast<size_t>(out)] = true;
      continue;
    }
    if (pointwise_in_place(n)) {
      moved[static_cast<size_t>(out)] = moved[static_cast<size_t>(n.args[0].value)];
      continue;
    }
    if (op_info(n.op).lowering != Lowering::Pointwise && !in(kFollowInput, n.op)) continue;
    bool fed = false;
    for_each_value_input(n, [&](ValueId v) { fed = fed || moved[static_cast<size_t>(v)]; });
    if (fed) moved[static_cast<size_t>(out)] = true;
  }
  if (std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
        return in(kConvs, n.op) && moved[static_cast<size_t>(n.outputs[0])];
      }) < 2)
    return g;

  Graph out = g;
  for (size_t v = 0; v < moved.size(); ++v)
    if (moved[v]) out.values[v].strides = channels_last_strides(out.values[v].sizes);
  out.nodes.clear();
  size_t next_copy = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (; next_copy < copies.size() && copies[next_copy].first == i; ++next_copy) {
      const ValueId x = copies[next_copy].second;
      TensorMeta m = g.meta(x);
      m.strides = channels_last_strides(m.sizes);
      m.storage_offset = 0;
      const ValueId xc = out.add_value(std::move(m));
      copy_of[x] = xc;
      out.nodes.push_back(Node{OpId::clone, {Arg::of_value(x), Arg::of_int(static_cast<int64_t>(c10::MemoryFormat::ChannelsLast))}, {xc}});
    }
    Node n = g.nodes[i];
    if (in(kConvs, n.op)) {
      auto it = copy_of.find(n.args[0].value);
      if (it != copy_of.end() && moved[static_cast<size_t>(n.outputs[0])]) n.args[0].value = it->second;
    }
    out.nodes.push_back(std::move(n));
  }
  return out;
}

}  // namespace fastdyn::codegen
