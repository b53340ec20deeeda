// codegen/capture/capture_attention.cpp — binders of attention: F.scaled_dot_product_attention and
// torch._native_multi_head_attention (nn.MultiheadAttention's inference fast path).
//
// sdpa is an extern call whose output layout depends on the kernel ATen picks: the fused CPU kernel
// lays its output out densely in the query's dimension order, the math fallback contiguously;
// which one runs follows ATen's own gates (flash_attention_cpu_runs), which the multi-head binder
// also uses to know whether ATen takes its SDPA route.
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"
#include "codegen/capture/meta_views.h"

#include <ATen/Context.h>

#include <limits>
#include <stdexcept>

namespace fastdyn::codegen {

using Ints = std::vector<int64_t>;

namespace {

// Whether ATen's CPU scaled_dot_product_attention takes its fused (flash) kernel for these
// inputs: the gates of sdp::use_flash_attention_cpp, in its order, less those the binder has
// already enforced (dense inputs, one dtype, equal batch sizes, equal query and key head sizes).
bool flash_attention_cpu_runs(const TensorMeta& q, const TensorMeta& k, const TensorMeta& v, const TensorMeta* mask,
                              double dropout_p, bool enable_gqa) {
  if (!at::globalContext().userEnabledFlashSDP()) return false;  // runtime-disabled
  if (dropout_p > 0.0) return false;
  if (q.dim() != 4) return false;  // k and v have q's rank (the binder checked)
  const int64_t hq = q.sizes[1], hk = k.sizes[1], hv = v.sizes[1];
  if (enable_gqa ? (hk != hv || hk == 0 || hq % hk != 0) : (hq != hk || hq != hv)) return false;
  if (mask) {
    if (mask->requires_grad) return false;
    if (mask->dim() < 2) return false;  // (ATen raises for it; sizes[dim - 2] would read before the vector)
    const int64_t l = q.sizes[2], s = k.sizes[2];
    const int64_t m_l = mask->sizes[mask->sizes.size() - 2], m_s = mask->sizes.back();
    if ((m_l != l && m_l != 1) || (m_s != s && m_s != 1)) return false;
    if (mask->dim() == 4) {
      if ((mask->sizes[0] != 1 && mask->sizes[0] != q.sizes[0]) || (mask->sizes[1] != 1 && mask->sizes[1] != hq))
        return false;
    } else if (mask->dim() != 2) {
      return false;
    }
  }
  if (q.sizes[3] != v.sizes[3]) return false;                  // value head size
  if (q.sizes[2] == 0 || k.sizes[2] == 0) return false;         // sequence lengths
  if (q.strides[3] != 1 || k.strides[3] != 1 || v.strides[3] != 1) return false;
  // NB: ATen's gate also asks for a unit last-dim stride of the mask; torch 2.13 takes the fused
  // kernel with a transposed mask all the same (test_sdpa_output_layout_matches_aten).
  using ST = c10::ScalarType;
  return q.dtype == ST::Float || q.dtype == ST::Double || q.dtype == ST::BFloat16 || q.dtype == ST::Half;
}

}  // namespace

CaptureResult bind_scaled_dot_product_attention(BindCall& c) {
  static const Signature sig(
      "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float "
      "dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId q = a.tensor("query"), k = a.tensor("key"), v = a.tensor("value");
  const TensorMeta &mq = c.graph.meta(q), &mk = c.graph.meta(k), &mv = c.graph.meta(v);
  if (auto err = same_dtype(c, "scaled_dot_product_attention", {q, k, v})) return CaptureResult::fail(*err);
  if (mq.dim() < 2 || mk.dim() != mq.dim() || mv.dim() != mq.dim())
    return CaptureResult::fail("scaled_dot_product_attention: query, key and value must have the same rank >= 2");
  if (mq.sizes.back() != mk.sizes.back())
    return CaptureResult::fail("scaled_dot_product_attention: query and key must have the same embedding size");
  if (mk.sizes[mk.sizes.size() - 2] != mv.sizes[mv.sizes.size() - 2])
    return CaptureResult::fail("scaled_dot_product_attention: key and value must have the same sequence length");
  // Grouped-query attention: key and value may carry fewer heads (dim -3) than the query, each
  // shared by a group of query heads; eager only checks that both counts divide the query's.
  const bool gqa = a.boolean("enable_gqa");
  const size_t heads_dim = mq.sizes.size() >= 3 ? mq.sizes.size() - 3 : mq.sizes.size();
  if (gqa) {
    if (heads_dim == mq.sizes.size())
      return CaptureResult::fail("scaled_dot_product_attention: enable_gqa needs a heads dim (rank >= 3)");
    int64_t hq = mq.sizes[heads_dim], hk = mk.sizes[heads_dim], hv = mv.sizes[heads_dim];
    if (hk == 0 || hv == 0 || hq % hk != 0 || hq % hv != 0)
      return CaptureResult::fail("scaled_dot_product_attention: number of heads in key (" + std::to_string(hk) +
                                 ") and value (" + std::to_string(hv) + ") must divide the number of heads in "
                                 "query (" + std::to_string(hq) + ")");
  }
  for (size_t i = 0; i + 2 < mq.sizes.size(); ++i)
    if ((!gqa || i != heads_dim) && (mq.sizes[i] != mk.sizes[i] || mq.sizes[i] != mv.sizes[i]))
      return CaptureResult::fail("scaled_dot_product_attention: batch dims of query, key and value differ");
  std::vector<ValueId> ins{q, k, v};
  if (!a.is_none("attn_mask")) {
    ValueId m = a.tensor("attn_mask");
    ins.push_back(m);
    Ints scores(mq.sizes.begin(), mq.sizes.end() - 1);
    scores.push_back(mk.sizes[mk.sizes.size() - 2]);
    auto b = broadcast_shapes({c.graph.meta(m).sizes, scores});
    if (!b || *b != scores)
      return CaptureResult::fail("scaled_dot_product_attention: attn_mask of shape " +
                                 shape_str(c.graph.meta(m).sizes) + " does not broadcast to " + shape_str(scores));
    if (a.boolean("is_causal"))
      return CaptureResult::fail("scaled_dot_product_attention: explicit attn_mask should not be set when is_causal=True");
  }
  Ints shape = mq.sizes;
  shape.back() = mv.sizes.back();
  const bool rg = any_requires_grad(c.graph, c.ctx, ins);
  // The fused CPU kernel lays its output out densely in the query's dimension order, also when
  // the query itself is not dense (q of a fused qkv projection, split then transposed); ATen's
  // math path returns a contiguous matmul result. Which one runs is ATen's choice
  // (sdp::select_sdp_backend_cpp), mirrored here test for test: downstream views were traced
  // against these strides (HF's attention does transpose(1, 2) then view), so a wrong guess
  // breaks the program (BERT in train mode: dropout_p > 0 takes the math path).
  const TensorMeta* mm = a.is_none("attn_mask") ? nullptr : &c.graph.meta(a.tensor("attn_mask"));
  // NB: other devices keep the earlier rule (4-d, unit last-dim strides, as many key as value
  // heads, equal head sizes); their kernels' gates are not mirrored yet.
  const bool fused = mq.device.is_cpu()
      ? flash_attention_cpu_runs(mq, mk, mv, mm, a.number("dropout_p"), gqa)
      : mq.dim() == 4 && mq.strides.back() == 1 && mk.strides.back() == 1 && mv.strides.back() == 1 &&
            mk.sizes[heads_dim] == mv.sizes[heads_dim] && shape.back() == mq.sizes.back();
  // On a GPU the fused kernels differ in layout: flash (half types, no mask, head size a multiple
  // of 8 up to 256) allocates its output like the query, while the memory-efficient kernel (float32,
  // or a mask) writes it [B, S, H, D]-major whatever the query's layout (strides S*H*D, D, H*D, 1 for
  // a contiguous 8x16x1024x64 query, where the query-like guess made the runtime copy it: 0.95x).
  // A wrong guess costs that copy, never a wrong value.
  using ST = c10::ScalarType;
  const bool flash_cuda = (mq.dtype == ST::Half || mq.dtype == ST::BFloat16) && mm == nullptr &&
                          mq.sizes.back() % 8 == 0 && mq.sizes.back() <= 256;
  Ints strides = fused ? preserve_format_strides(mq) : contiguous_strides(shape);
  if (fused && !mq.device.is_cpu() && !flash_cuda) {
    const int64_t s = shape[2], h = shape[1], d = shape[3];
    strides = {s * h * d, d, h * d, 1};
  }
  TensorMeta out = make_meta(mq.dtype, mq.device, shape, strides, rg);
  return tensor_result(emit1(c.graph, OpId::scaled_dot_product_attention,
                             {Arg::of_value(q), Arg::of_value(k), Arg::of_value(v), const_arg(a.get("attn_mask")),
                              Arg::of_double(a.number("dropout_p")), Arg::of_bool(a.boolean("is_causal")),
                              const_arg(a.get("scale")), Arg::of_bool(gqa)},
                             out));
}

// torch._native_multi_head_attention: nn.MultiheadAttention's inference fast path (torchvision's
// ViT encoder). Where ATen's own implementation takes its scaled-dot-product route (self-attention
// with query, key and value one tensor, no mask, no weights wanted, a head size divisible by 8,
// and a fused SDPA kernel for the heads), it is that route's ops: the packed in-projection, three
// chunks viewed as heads, SDPA, the heads merged back and the out-projection; the attention
// weights are None. Anything else (ATen's math route, a GPU, whose kernel choice is not mirrored
// here) is left to eager.
CaptureResult bind__native_multi_head_attention(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "_native_multi_head_attention(Tensor query, Tensor key, Tensor value, int embed_dim, int num_head, "
                          "Tensor qkv_weight, Tensor qkv_bias, Tensor proj_weight, Tensor proj_bias, Tensor? mask=None, "
                          "bool need_weights=True, bool average_attn_weights=True, int? mask_type=None)");
  const std::string op = "_native_multi_head_attention";
  const ValueId query = a.tensor("query");
  const TensorMeta q = c.graph.meta(query);
  const int64_t d = a.integer("embed_dim"), heads = a.integer("num_head");
  if (a.tensor("key") != query || a.tensor("value") != query) return CaptureResult::fail(op + ": not self-attention on one tensor");
  if (!a.is_none("mask") || a.boolean("need_weights")) return CaptureResult::fail(op + ": a mask or the attention weights");
  if (!q.device.is_cpu()) return CaptureResult::fail(op + ": ATen's kernel choice on " + q.device.str() + " is not mirrored");
  if (q.dim() != 3 || q.sizes[2] != d || heads <= 0 || d % heads != 0 || (d / heads) % 8 != 0)
    return CaptureResult::fail(op + ": not ATen's scaled-dot-product route (query " + shape_str(q.sizes) + ", " +
                               std::to_string(heads) + " heads)");
  const int64_t per_head = d / heads, batch = q.sizes[0];
  // ATen chooses the route on the query viewed as heads.
  const meta::MetaResult viewed = meta::view(q, {batch, -1, heads, per_head});
  const TensorMeta as_heads = viewed.ok() ? meta::transpose(viewed.meta, 1, 2) : q;
  if (!viewed.ok() || !flash_attention_cpu_runs(as_heads, as_heads, as_heads, nullptr, 0.0, false))
    return CaptureResult::fail(op + ": ATen takes its math route here");
  auto call = [&](Family f, std::vector<CallArg> args) {
    CaptureResult r = record_call(c.graph, c.ctx, f, args, {});
    if (!r.ok) throw std::runtime_error(op + ": " + r.reason);
    return r;
  };
  try {
    const ValueId x = call(Family::linear, {CallArg::tensor(query), a.get("qkv_weight"), a.get("qkv_bias")}).values[0];
    const CaptureResult chunks = call(Family::chunk, {CallArg::tensor(x), CallArg::of_int(3), CallArg::of_int(-1)});
    std::vector<CallArg> qkv;
    for (ValueId part : chunks.values) {
      const ValueId h = call(Family::view, {CallArg::tensor(part), CallArg::of_ints({batch, -1, heads, per_head})}).values[0];
      qkv.push_back(CallArg::tensor(call(Family::transpose, {CallArg::tensor(h), CallArg::of_int(1), CallArg::of_int(2)}).values[0]));
    }
    qkv.push_back(CallArg::none());  // attn_mask
    const ValueId y = call(Family::scaled_dot_product_attention, qkv).values[0];
    const ValueId t = call(Family::transpose, {CallArg::tensor(y), CallArg::of_int(1), CallArg::of_int(2)}).values[0];
    const ValueId merged = call(Family::reshape, {CallArg::tensor(t), CallArg::of_ints({batch, -1, d})}).values[0];
    const ValueId out = call(Family::linear, {CallArg::tensor(merged), a.get("proj_weight"), a.get("proj_bias")}).values[0];
    CaptureResult r;
    r.ok = true;
    r.shape = CaptureResult::Shape::Tuple;
    r.values = {out, -1};  // (output, None)
    return r;
  } catch (const std::runtime_error& e) {
    return CaptureResult::fail(e.what());
  }
}

}  // namespace fastdyn::codegen
