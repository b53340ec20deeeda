// codegen/autograd/joint.cpp — see joint.h.
#include "codegen/autograd/joint.h"

#include "codegen/autograd/derivatives.h"
#include "codegen/autograd/min_cut.h"
#include "codegen/capture/meta_rules.h"
#include "codegen/loop/passes.h"
#include "codegen/shapes/propagate.h"
#include "runtime/errors.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace fastdyn::codegen::autograd {
namespace {

bool is_input(const Graph& g, ValueId v) { return std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end(); }

// The values computed from no graph input and no random draw (an attention mask from arange and
// cumsum): constant folding computes them once, at compile time, in each graph that has them.
std::unordered_set<ValueId> input_free_values(const Graph& g) {
  std::unordered_set<ValueId> input_free;
  for (const Node& n : g.nodes) {
    bool free = op_info(n.op).category != OpCategory::Random;
    for_each_value_input(n, [&](ValueId v) { free = free && input_free.count(v) > 0; });
    if (free) input_free.insert(n.outputs.begin(), n.outputs.end());
  }
  return input_free;
}

// The index of the node producing each value (graph inputs: none).
std::unordered_map<ValueId, size_t> producers(const Graph& g, size_t end) {
  std::unordered_map<ValueId, size_t> p;
  for (size_t i = 0; i < end; ++i)
    for (ValueId v : g.nodes[i].outputs) p[v] = i;
  return p;
}

// A sub-graph of j: `inputs` become its inputs, `nodes` (indices into j.nodes, in order) its
// nodes, `outputs` its outputs; values are renumbered and nothing requires grad.
Graph extract(const Graph& j, const std::vector<ValueId>& inputs, const std::vector<size_t>& nodes,
              const std::vector<ValueId>& outputs) {
  Graph r;
  std::unordered_map<ValueId, ValueId> map;
  auto fresh = [](TensorMeta m) {
    m.requires_grad = false;
    return m;
  };
  for (ValueId v : inputs) {
    if (map.count(v)) throw InternalError("autograd partition: value %" + std::to_string(v) + " is two inputs");
    map[v] = r.add_input(fresh(j.meta(v)));
  }
  auto mapped = [&](ValueId v) {
    auto it = map.find(v);
    if (it == map.end()) throw InternalError("autograd partition: value %" + std::to_string(v) + " is read but not computed");
    return it->second;
  };
  for (size_t idx : nodes) {
    Node n = j.nodes[idx];
    for_each_value_input_ref(n, [&](ValueId& v) { v = mapped(v); });
    for (ValueId& v : n.outputs) {
      const ValueId nv = r.add_value(fresh(j.meta(v)));
      map[v] = nv;
      v = nv;
    }
    r.nodes.push_back(std::move(n));
  }
  for (ValueId v : outputs) r.outputs.push_back(mapped(v));
  return r;
}

// Whether the backward may compute this forward node again instead of reading its output.
bool recomputable(const Node& n) {
  const OpCategory c = op_info(n.op).category;
  return c == OpCategory::Pointwise || c == OpCategory::View || n.op == OpId::_to_copy || n.op == OpId::clone;
}

}  // namespace

bool needs_autograd(const Graph& g) {
  if (traced_without_grad(g)) return false;
  for (ValueId v : g.outputs)
    if (g.meta(v).requires_grad && !is_input(g, v)) return true;
  return false;
}

namespace {

// One level: the joint graph of `gl` seeded at `seeds` (values of gl), and its partition.
struct LevelPart {
  Graph backward;               // saved, then one gradient per seed -> the gradients of gl's diff inputs that get one
  std::vector<ValueId> saved;   // forward values of gl the backward reads, in value order
  std::vector<int32_t> edge_grad;  // per input of gl that requires grad, in input order: backward output, or -1
};

// What the forward saves for the backward and which forward nodes the backward computes again.
struct Cut {
  std::set<ValueId> saved;      // values of gl
  std::set<size_t> recompute;   // indices into gl.nodes
};

// The cut of joint.h, as a minimum s-t cut (the network of AOTAutograd's min-cut partitioner): each
// value v is an edge in(v) -> out(v) whose capacity is what saving v costs; the source feeds the
// values only the forward can compute (graph inputs, outputs of nodes that are not recomputed:
// matmul, conv, sdpa, reductions, random draws), every value the backward reads feeds the sink,
// and a recomputable node's inputs feed its outputs. Each value on the cut is saved; every value
// the backward needs beyond the cut is recomputed. Saving costs 4 per byte plus a tie-break (1 for
// a value the backward reads, 2 for one it would recompute from: of equal bytes, save what is read,
// as recomputing it would hold both in the backward, above eager's peak); a graph input costs 1,
// as the caller holds it anyway. A value the caller gets back (an output, or a lower level's
// output that is this level's input: `returned`) is saved only where the backward reads it, as
// eager's: recomputing from it would read the caller's later in-place changes, which eager's
// backward never sees. An input the forward writes into cannot be saved (it holds the new contents
// by the time the backward runs).
Cut cheapest_cut(const Graph& gl, const std::unordered_map<ValueId, size_t>& made_by, const std::set<ValueId>& read,
                 const std::set<ValueId>& written, const std::set<ValueId>& returned,
                 const std::function<bool(const Node&)>& may_recompute) {
  const int V = static_cast<int>(gl.values.size());
  const int S = 2 * V, T = 2 * V + 1;
  auto in = [](ValueId v) { return 2 * static_cast<int>(v); };
  auto out = [](ValueId v) { return 2 * static_cast<int>(v) + 1; };
  const std::set<ValueId> outputs(gl.outputs.begin(), gl.outputs.end());
  FlowNetwork net(2 * V + 2);
  for (ValueId v = 0; v < V; ++v) {
    auto it = made_by.find(v);
    const bool recomputed = it != made_by.end() && may_recompute(gl.nodes[it->second]);
    if (!recomputed) net.add_edge(S, in(v), FlowNetwork::kInfinite);
    const bool is_read = read.count(v) > 0, is_returned = returned.count(v) > 0 || outputs.count(v) > 0;
    int64_t cost = 4 * gl.meta(v).nbytes() + (is_read ? 1 : 2);
    if (written.count(v) || (is_returned && !is_read)) cost = FlowNetwork::kInfinite;  // never saved
    else if (it == made_by.end() && !returned.count(v)) cost = 1;                     // a graph input
    net.add_edge(in(v), out(v), cost);
  }
  for (size_t i = 0; i < gl.nodes.size(); ++i) {
    const Node& n = gl.nodes[i];
    if (!may_recompute(n)) continue;
    for (ValueId o : n.outputs) for_each_value_input(n, [&](ValueId u) { net.add_edge(out(u), in(o), FlowNetwork::kInfinite); });
  }
  for (ValueId v : read) net.add_edge(out(v), T, FlowNetwork::kInfinite);
  if (net.max_flow(S, T) >= FlowNetwork::kInfinite) throw NoDerivative("the backward reads an input the graph writes into");
  const std::vector<bool> side = net.source_side(S);
  Cut cut;
  std::vector<ValueId> todo(read.begin(), read.end());
  std::set<ValueId> seen(read.begin(), read.end());
  while (!todo.empty()) {
    const ValueId v = todo.back();
    todo.pop_back();
    if (side[static_cast<size_t>(in(v))] && !side[static_cast<size_t>(out(v))]) {
      cut.saved.insert(v);
      continue;
    }
    auto it = made_by.find(v);
    if (side[static_cast<size_t>(in(v))] || it == made_by.end())
      throw InternalError("autograd partition: value %" + std::to_string(v) + " is neither saved nor recomputable");
    cut.recompute.insert(it->second);
    for_each_value_input(gl.nodes[it->second], [&](ValueId u) {
      if (seen.insert(u).second) todo.push_back(u);
    });
  }
  return cut;
}

LevelPart differentiate(const Graph& gl, const std::vector<ValueId>& seed_values, const std::set<ValueId>& written,
                        const std::set<ValueId>& returned) {
  const size_t F = gl.nodes.size();
  const std::unordered_map<ValueId, size_t> made_by = producers(gl, F);
  Graph j = gl;
  std::unordered_map<ValueId, ValueId> grad_of;
  std::vector<ValueId> seeds;
  for (ValueId v : seed_values) {
    const TensorMeta m = gl.meta(v);
    const ValueId seed = j.add_input(contiguous_meta(m.dtype, m.device, m.sizes, false));
    grad_of[v] = seed;
    seeds.push_back(seed);
  }
  auto accumulate = [&](ValueId x, ValueId gx) {
    auto it = grad_of.find(x);
    if (it == grad_of.end()) {
      grad_of[x] = gx;
      return;
    }
    const ValueId sum = GradBuilder(j).add(it->second, gx);
    grad_of[x] = sum;
  };
  for (size_t i = F; i-- > 0;) {
    const Node n = j.nodes[i];
    std::vector<ValueId> gs;
    bool any_grad = false;
    for (ValueId o : n.outputs) {
      auto it = grad_of.find(o);
      gs.push_back(it == grad_of.end() ? -1 : it->second);
      any_grad = any_grad || it != grad_of.end();
    }
    bool grad_input = false;
    for_each_value_input(n, [&](ValueId v) { grad_input = grad_input || j.meta(v).requires_grad; });
    if (!any_grad || !grad_input) continue;
    const Formula f = derivative(n.op);
    if (!f) throw NoDerivative("no derivative for " + qualified_name(n.op) + " (" + print_node(gl, n) + ")");
    GradBuilder b(j, n, gs);
    f(b);
    for (const GradBuilder::Given& gv : b.given()) {
      const Arg& a = n.args[gv.pos];
      accumulate(gv.elem >= 0 ? a.values[static_cast<size_t>(gv.elem)] : a.value, gv.grad);
    }
  }
  LevelPart part;
  std::vector<ValueId> grads_out;
  for (ValueId in : gl.inputs) {
    if (!gl.meta(in).requires_grad) continue;
    auto it = grad_of.find(in);
    part.edge_grad.push_back(it == grad_of.end() ? -1 : static_cast<int32_t>(grads_out.size()));
    if (it != grad_of.end()) grads_out.push_back(it->second);
  }

  // The backward's nodes: those its outputs need.
  std::unordered_set<ValueId> live(grads_out.begin(), grads_out.end());
  std::vector<size_t> bwd_nodes;
  for (size_t i = j.nodes.size(); i-- > F;) {
    const Node& n = j.nodes[i];
    if (std::none_of(n.outputs.begin(), n.outputs.end(), [&](ValueId v) { return live.count(v) > 0; })) continue;
    bwd_nodes.push_back(i);
    for_each_value_input(n, [&](ValueId v) { live.insert(v); });
  }
  std::reverse(bwd_nodes.begin(), bwd_nodes.end());
  // The forward values it reads, in value order.
  const std::unordered_set<ValueId> seed_set(seeds.begin(), seeds.end());
  std::set<ValueId> read;
  for (ValueId v : live)
    if (v < static_cast<ValueId>(gl.values.size()) && !seed_set.count(v)) read.insert(v);

  // Saved or recomputed (joint.h): the cheapest cut, by bytes kept for the backward.
  const std::unordered_set<ValueId> input_free = input_free_values(gl);
  auto may_recompute = [&](const Node& n) { return recomputable(n) || input_free.count(n.outputs.at(0)) > 0; };
  const Cut cut = cheapest_cut(gl, made_by, read, written, returned, may_recompute);
  part.saved.assign(cut.saved.begin(), cut.saved.end());
  std::vector<ValueId> bwd_inputs = part.saved;
  bwd_inputs.insert(bwd_inputs.end(), seeds.begin(), seeds.end());
  std::vector<size_t> nodes(cut.recompute.begin(), cut.recompute.end());
  nodes.insert(nodes.end(), bwd_nodes.begin(), bwd_nodes.end());
  part.backward = extract(j, bwd_inputs, nodes, grads_out);
  return part;
}

// g with the values `cut` read from new inputs (after g's, in order) wherever a node reads them.
Graph cut_at(const Graph& g, const std::vector<ValueId>& cut, std::unordered_map<ValueId, ValueId>& original) {
  Graph gl = g;
  std::unordered_map<ValueId, ValueId> replaced;
  for (ValueId y : cut) {
    const ValueId ny = gl.add_input(g.meta(y));
    replaced[y] = ny;
    original[ny] = y;
  }
  for (Node& n : gl.nodes)
    for_each_value_input_ref(n, [&](ValueId& v) {
      if (auto it = replaced.find(v); it != replaced.end()) v = it->second;
    });
  return gl;
}

// scaled_dot_product_attention with dropout on the CPU runs ATen's math kernel, whose dropout draws
// from the generator like F.dropout: it is written out as that kernel computes it (q and k scaled
// by sqrt(scale), -inf where masked, softmax, dropout, @ v), so that the dropout's mask can be
// saved. On a GPU the fused kernels draw their own way: refused there (the sdpa row says why).
Graph write_out_sdpa_dropout(const Graph& g) {
  Graph r = g;
  r.nodes.clear();
  std::unordered_map<ValueId, ValueId> renamed;
  for (Node n : g.nodes) {
    for_each_value_input_ref(n, [&](ValueId& v) {
      if (auto it = renamed.find(v); it != renamed.end()) v = it->second;
    });
    const bool target = n.op == OpId::scaled_dot_product_attention && n.args.at(4).kind == Arg::Kind::Double &&
                        n.args[4].d > 0.0 && g.meta(n.outputs[0]).device.is_cpu() && g.meta(n.outputs[0]).requires_grad &&
                        !(n.args[7].kind == Arg::Kind::Bool && n.args[7].b);
    if (!target) {
      r.nodes.push_back(std::move(n));
      continue;
    }
    GradBuilder b(r, n, {}, /*forward=*/true);
    const ValueId att = b.call(Family::dropout, {GradBuilder::t(attention_weights(b)), GradBuilder::n(n.args[4].d),
                                                 CallArg::of_bool(true)});
    const ValueId out = b.matmul(att, b.in(2));
    const TensorMeta &want = g.meta(n.outputs[0]), &got = r.meta(out);
    if (got.sizes != want.sizes || got.strides != want.strides || got.dtype != want.dtype)
      throw NoDerivative("scaled_dot_product_attention with dropout: the written-out kernel's layout differs");
    renamed[n.outputs[0]] = out;
  }
  for (ValueId& v : r.outputs)
    if (renamed.count(v)) v = renamed[v];
  return r;
}

// Dropout in training becomes native_dropout, whose second output is the mask the backward reads
// (the same draw from the same generator: eager's CPU dropout and native_dropout both fill a
// tensor like the input with bernoulli(1 - p)). `masks` gets the mask values.
Graph with_dropout_masks(const Graph& g, std::vector<ValueId>& masks) {
  Graph r = g;
  for (Node& n : r.nodes) {
    if (n.op != OpId::dropout || n.args.size() < 3 || !(n.args[2].kind == Arg::Kind::Bool && n.args[2].b)) continue;
    if (!r.meta(n.outputs.at(0)).requires_grad) continue;
    TensorMeta m = r.meta(n.args[0].value);  // static: the split works on a graph without symbols
    m.dtype = c10::ScalarType::Bool;
    m.requires_grad = false;
    const ValueId mask = r.add_value(m);
    n.op = OpId::native_dropout;
    n.outputs.push_back(mask);
    masks.push_back(mask);
  }
  return r;
}

// Attention on a GPU (in training, and in inference: the cuda backend, joint.h) where eager's sdpa runs the memory-efficient kernel and this one
// surely can (float32, where flash attention does not apply; 4-d q, k, v of one batch and head
// count, head dims a multiple of 8 up to 128 with unit last stride; no dropout, no GQA; a mask, if
// any, a graph input, boolean or float32 over a key length that is a multiple of 16) becomes that
// kernel's op:
// its backward reads the saved output and log-sum-exp and never materialises the [B, H, L, S]
// weights that the sdpa row recomputes. A mask becomes the additive bias eager's sdpa makes of it
// (0 where kept, -inf where masked), expanded to [B, H, L, S]; with the key length a multiple of 16
// its rows are aligned as the kernel needs without the padding eager would add. In inference the
// mask may be any value (nothing recomputes it), and eager's own sdpa would convert it the same way
// in ATen calls of its own (a logical_not, a where, a fill per call): here it fuses into the kernels.
}  // namespace

Graph with_efficient_attention(const Graph& g, bool training) {
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == OpId::scaled_dot_product_attention; })) return g;
  const std::unordered_set<ValueId> input_free = training ? input_free_values(g) : std::unordered_set<ValueId>{};
  Graph r = g;
  r.nodes.clear();
  for (Node n : g.nodes) {
    if (n.op != OpId::scaled_dot_product_attention || g.meta(n.outputs.at(0)).requires_grad != training ||
        std::any_of(n.args.begin(), n.args.end(), [&](const Arg& a) { return a.kind == Arg::Kind::Value && g.meta(a.value).symbolic(); })) {
      r.nodes.push_back(std::move(n));
      continue;
    }
    // NB: copies: add_value below grows the value table that r.meta refers into.
    const TensorMeta q = r.meta(n.args[0].value), k = r.meta(n.args[1].value), v = r.meta(n.args[2].value);
    const bool no_dropout = n.args.size() <= 4 || n.args[4].number() == 0.0;
    const bool no_gqa = n.args.size() <= 7 || n.args[7].kind != Arg::Kind::Bool || !n.args[7].b;
    const bool masked = n.args.size() > 3 && n.args[3].kind == Arg::Kind::Value;
    bool ok = q.device.is_cuda() && no_dropout && no_gqa && (masked || n.args.size() <= 3 || n.args[3].kind == Arg::Kind::None);
    for (const TensorMeta* m : {&q, &k, &v})
      ok = ok && m->dtype == c10::kFloat && m->sizes.size() == 4 && m->strides.size() == 4 && m->strides[3] == 1 &&
           m->sizes[3] % 8 == 0 && m->sizes[3] <= 128 && m->sizes[0] == q.sizes[0] && m->sizes[1] == q.sizes[1] &&
           m->device == q.device;
    ok = ok && k.sizes[3] == q.sizes[3] && k.sizes[2] == v.sizes[2];
    const int64_t B = q.sizes[0], H = q.sizes[1], L = q.sizes[2], S = ok ? k.sizes[2] : 0;
    if (ok && masked) {
      const TensorMeta mask = r.meta(n.args[3].value);
      // A mask the graph is given, or one it computes from nothing (Hugging Face's causal mask:
      // arange, cumsum, compare), which the backward recomputes and constant folding computes
      // once at compile time. Not one computed from inputs: the backward would recompute it.
      ok = (!training || is_input(g, n.args[3].value) || input_free.count(n.args[3].value) > 0) && (mask.dtype == c10::kBool || mask.dtype == c10::kFloat) && S % 16 == 0 &&
           !mask.sizes.empty() && mask.sizes.size() <= 4 && mask.sizes.back() == S && mask.device == q.device;
    }
    if (!ok) {
      r.nodes.push_back(std::move(n));
      continue;
    }
    Arg bias = Arg::none();
    if (masked) {
      GradBuilder b(r, n, {}, /*forward=*/true);
      const TensorMeta mask = r.meta(n.args[3].value);
      ValueId add = n.args[3].value;
      if (mask.dtype == c10::kBool)
        add = b.call(Family::masked_fill,
                     {GradBuilder::t(b.call(Family::zeros, {GradBuilder::ints(mask.sizes)},
                                            {{"dtype", CallArg::of_dtype(c10::kFloat)}, {"device", CallArg::of_device(q.device)}})),
                      GradBuilder::t(b.call(Family::logical_not, {GradBuilder::t(add)})),
                      GradBuilder::n(-std::numeric_limits<double>::infinity())});
      else
        add = b.call(Family::contiguous, {GradBuilder::t(add)});
      bias = Arg::of_value(b.call(Family::expand, {GradBuilder::t(add), GradBuilder::ints({B, H, L, S})}));
    }
    const ValueId lse = r.add_value(contiguous_meta(c10::kFloat, q.device, {B, H, (L + 31) / 32 * 32}, false));
    const ValueId seed = r.add_value(contiguous_meta(c10::kLong, q.device, {}, false));
    const ValueId offset = r.add_value(contiguous_meta(c10::kLong, q.device, {}, false));
    const Arg is_causal = n.args.size() > 5 ? n.args[5] : Arg::of_bool(false);
    const Arg scale = n.args.size() > 6 ? n.args[6] : Arg::none();
    n.op = OpId::_scaled_dot_product_efficient_attention;
    n.args = {n.args[0], n.args[1], n.args[2], bias, Arg::of_bool(true), Arg::of_double(0.0), is_causal, scale};
    n.outputs = {n.outputs[0], lse, seed, offset};
    r.nodes.push_back(std::move(n));
  }
  return r;
}

namespace {

// Whether eager's batch_norm runs cuDNN's kernels for this call (ATen's _batch_norm_impl_index,
// in training): a GPU input of at least 3 dims, not bfloat16, half only with float weights, weight,
// bias and both running statistics or neither, a batch cuDNN takes, cudnn_enabled, eps at least
// cuDNN's minimum, fewer than 2^31 elements.
bool eager_uses_cudnn(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.args[0].value);
  const TensorMeta& w = g.meta(n.args[1].value);
  const bool stats = n.args[3].kind == Arg::Kind::Value, var = n.args[4].kind == Arg::Kind::Value;
  int64_t numel = 1;
  for (int64_t s : x.sizes) numel *= s;
  const double eps = n.args[7].number().value_or(0.0);
  return x.device.is_cuda() && x.dtype != c10::kBFloat16 && w.dtype != c10::kBFloat16 &&
         (x.dtype != c10::kHalf || w.dtype == c10::kFloat) && stats == var && x.sizes.size() >= 3 &&
         x.sizes[0] <= 880801 && n.args.size() > 8 && n.args[8].kind == Arg::Kind::Bool && n.args[8].b &&
         at::detail::getCUDAHooks().compiledWithCuDNN() && eps >= at::detail::getCUDAHooks().batchnormMinEpsilonCuDNN() &&
         at::detail::getCUDAHooks().versionCuDNN() >= 5110L && numel < std::numeric_limits<int32_t>::max();
}

// An affine batch norm in training becomes the op eager's autograd records, with the statistics
// its backward kernel reads: cudnn_batch_norm where eager runs cuDNN (its reserve space saved too;
// its size is cuDNN's to say, so its meta is a placeholder nothing reads), else native_batch_norm.
// NB: on an H200, ATen's native kernels took 3.0 ms of a ResNet-18 step's batch norms against
// cuDNN's 2.0 ms in eager.
Graph with_batch_norm_stats(const Graph& g) {
  Graph r = g;
  for (Node& n : r.nodes) {
    if (n.op != OpId::batch_norm || !(n.args.at(5).kind == Arg::Kind::Bool && n.args[5].b)) continue;
    if (n.args[1].kind != Arg::Kind::Value || n.args[2].kind != Arg::Kind::Value) continue;
    if (!r.meta(n.outputs.at(0)).requires_grad) continue;
    const TensorMeta x = r.meta(n.args[0].value);
    const c10::ScalarType stat = x.dtype == c10::kHalf || x.dtype == c10::kBFloat16 ? c10::kFloat : x.dtype;
    const ValueId mean = r.add_value(contiguous_meta(stat, x.device, {x.sizes.at(1)}, false));
    const ValueId invstd = r.add_value(contiguous_meta(stat, x.device, {x.sizes.at(1)}, false));
    const bool cudnn = eager_uses_cudnn(r, n);
    n.op = cudnn ? OpId::cudnn_batch_norm : OpId::native_batch_norm;
    n.args.resize(8);  // neither has cudnn_enabled
    n.outputs = {n.outputs[0], mean, invstd};
    if (cudnn) n.outputs.push_back(r.add_value(contiguous_meta(c10::kByte, x.device, {0}, false)));
  }
  return r;
}

// The eager replay of a graph with native_dropout (create_graph=True must see the masks of the
// call, not draw new ones): each becomes input * mask * (1 / (1 - p)) with the mask an input,
// after the graph's own, in `masks` order.
Graph replay_masks(const Graph& g, const std::vector<ValueId>& masks) {
  Graph r = g;
  std::unordered_map<ValueId, ValueId> mask_input;
  for (ValueId m : masks) mask_input[m] = r.add_input(g.meta(m));
  std::vector<Node> nodes;
  for (const Node& n : g.nodes) {
    if (n.op != OpId::native_dropout) {
      nodes.push_back(n);
      continue;
    }
    const ValueId x = n.args[0].value, y = n.outputs[0];
    const double p = n.args[1].number().value_or(0.0);
    TensorMeta t = r.meta(y);
    const ValueId masked = r.add_value(t);
    nodes.push_back(Node{OpId::mul_Tensor, {Arg::of_value(x), Arg::of_value(mask_input.at(n.outputs[1]))}, {masked}});
    nodes.push_back(Node{OpId::mul_Scalar, {Arg::of_value(masked), Arg::of_double(p >= 1.0 ? 0.0 : 1.0 / (1.0 - p))}, {y}});
  }
  r.nodes = std::move(nodes);
  return r;
}

// A graph specialised to one call's sizes (shapes::specialize), or one whose symbols were all
// pinned, as a plain static graph: the split and its formulas work on numbers, and the halves
// compile for these sizes (kernels that read sizes at run time are not shared across sizes yet).
Graph without_symbols(const Graph& g) {
  Graph r = g;
  r.binding.clear();
  r.symbols.clear();  // pinned ones: their hints are the numbers already
  for (TensorMeta& m : r.values) {
    m.sym_sizes.clear();
    m.sym_strides.clear();
    m.sym_offset.clear();
  }
  for (Node& n : r.nodes)
    for (Arg& a : n.args) a.sym_ints.clear();
  return r;
}

}  // namespace

AutogradSplit split_for_autograd(const Graph& symbolic_or_not) {
  if (shapes::is_dynamic(symbolic_or_not)) throw InternalError("autograd split of a symbolic graph (compile_dynamic splits each size, specialised)");
  const Graph traced = without_symbols(symbolic_or_not);
  // In-place ops on the graph's own values become their out-of-place twins (nn.ReLU(inplace=True));
  // a graph that writes into its inputs keeps ATen's autograd (eager's version counters and views).
  loop::Functional functional;
  try {
    functional = loop::functionalize(write_out_sdpa_dropout(traced), /*random_ok=*/true);
  } catch (const loop::Unsupported& e) {
    throw NoDerivative(e.what());
  }
  if (!functional.extern_writes.empty()) throw NoDerivative("an in-place ATen call (index_copy_) writes an input");
  // Writes into inputs that need no gradient (batch norm's num_batches_tracked.add_(1)) are
  // replayed by the forward as copy_ nodes after the rest, one per version bump of eager's.
  for (const loop::WriteBack& wb : functional.writebacks) {
    if (functional.graph.meta(wb.input).requires_grad) throw NoDerivative("the graph writes into an input that requires grad");
    // x.sub_(y * w) with w requiring grad: eager's x joins the autograd graph (requires_grad, a
    // grad_fn of its own), which a write-back made outside grad mode would not give it.
    if (functional.graph.meta(wb.value).requires_grad) throw NoDerivative("the graph writes a value that requires grad into an input");
    for (ValueId out : functional.graph.outputs)
      if (out == wb.value) throw NoDerivative("the graph returns an input it writes into");
  }
  std::set<ValueId> written;  // inputs the forward writes into (their values at the forward's start are gone after it)
  for (const loop::WriteBack& wb : functional.writebacks) written.insert(wb.input);
  std::vector<ValueId> masks;
  const Graph g = with_efficient_attention(with_batch_norm_stats(with_dropout_masks(functional.graph, masks)), /*training=*/true);
  for (const Node& n : g.nodes) {
    const OpCategory c = op_info(n.op).category;
    if (c == OpCategory::InPlace) throw NoDerivative("in-place op " + qualified_name(n.op) + " in a graph that needs a backward");
    bool grad_out = false;
    for (ValueId v : n.outputs) grad_out = grad_out || g.meta(v).requires_grad;
    if (c == OpCategory::Random && grad_out && n.op != OpId::native_dropout)
      throw NoDerivative("random op " + qualified_name(n.op) + " in a graph that needs a backward");
  }
  const std::unordered_map<ValueId, size_t> made_by = producers(g, g.nodes.size());
  AutogradSplit split;
  runtime::AutogradPlan& plan = split.plan;
  plan.num_outputs = g.outputs.size();
  plan.input_used.assign(g.inputs.size(), false);
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const ValueId in = g.inputs[k];
    bool used = std::find(g.outputs.begin(), g.outputs.end(), in) != g.outputs.end();
    for (const Node& n : g.nodes)
      for_each_value_input(n, [&](ValueId v) { used = used || v == in; });
    plan.input_used[k] = used;
  }
  for (const loop::WriteBack& wb : functional.writebacks)
    for (size_t k = 0; k < g.inputs.size(); ++k)
      if (g.inputs[k] == wb.input) plan.written_inputs.push_back(static_cast<int32_t>(k));
  // The outputs that require grad: the first position of each distinct computed value. One that is a
  // view of an input or of another such output (x.view(...), y and y[:, -1]) is re-made by the
  // runtime as a view of that base with grad mode on (runtime/autograd_plan.h `views`), as eager
  // makes it; the others are the diff outputs, which get the nodes.
  std::vector<int32_t> candidates;
  for (size_t p = 0; p < g.outputs.size(); ++p) {
    const ValueId v = g.outputs[p];
    const size_t first = static_cast<size_t>(std::find(g.outputs.begin(), g.outputs.end(), v) - g.outputs.begin());
    plan.output_first.push_back(static_cast<int32_t>(first));
    if (first == p && g.meta(v).requires_grad && !is_input(g, v)) candidates.push_back(static_cast<int32_t>(p));
  }
  auto output_position = [&](ValueId v) -> int32_t {
    for (int32_t q : candidates)
      if (g.outputs[static_cast<size_t>(q)] == v) return q;
    return -1;
  };
  std::vector<int32_t> diff;
  std::unordered_map<int32_t, runtime::AutogradPlan::View> view_of;  // output position -> its base
  for (int32_t p : candidates) {
    const ValueId v = g.outputs[static_cast<size_t>(p)];
    for (ValueId cur = v;;) {
      auto it = made_by.find(cur);
      if (it == made_by.end()) {  // the chain reached a graph input
        const int32_t k = static_cast<int32_t>(std::find(g.inputs.begin(), g.inputs.end(), cur) - g.inputs.begin());
        view_of[p] = {p, true, k};
        break;
      }
      const Node& n = g.nodes[it->second];
      if (op_info(n.op).category != OpCategory::View) break;
      cur = n.args.at(0).value;
      if (const int32_t q = output_position(cur); q >= 0) {
        view_of[p] = {p, false, q};
        break;
      }
    }
    if (!view_of.count(p)) diff.push_back(p);
  }
  for (auto& [p, view] : view_of) {
    while (!view.of_input && view_of.count(view.base)) view = {p, view_of[view.base].of_input, view_of[view.base].base};
  }
  // Levels: 0 for an output computed from no other diff output, else one more than the highest
  // level among those it is computed from. A view output is at its base's level (-1 for a view of
  // an input): what the graph computes from it takes its gradient through the view's edge.
  std::unordered_map<ValueId, std::set<ValueId>> from;  // value -> the outputs it is computed from (itself included)
  std::unordered_map<ValueId, int> level_of;
  std::unordered_map<ValueId, const runtime::AutogradPlan::View*> view_value;
  for (int32_t p : diff) level_of[g.outputs[static_cast<size_t>(p)]] = 0;
  for (const auto& [p, view] : view_of) view_value[g.outputs[static_cast<size_t>(p)]] = &view;
  for (const Node& n : g.nodes) {
    std::set<ValueId> acc;
    for_each_value_input(n, [&](ValueId v) {
      auto it = from.find(v);
      if (it != from.end()) acc.insert(it->second.begin(), it->second.end());
    });
    for (ValueId o : n.outputs) {
      from[o] = acc;
      if (auto vv = view_value.find(o); vv != view_value.end()) {
        const runtime::AutogradPlan::View& view = *vv->second;
        level_of[o] = view.of_input ? -1 : level_of.at(g.outputs[static_cast<size_t>(view.base)]);
        from[o].insert(o);
        continue;
      }
      if (!level_of.count(o)) continue;
      for (ValueId a : acc) level_of[o] = std::max(level_of[o], level_of[a] + 1);
      from[o].insert(o);
    }
  }
  int levels = 0;
  for (int32_t p : diff) levels = std::max(levels, level_of[g.outputs[static_cast<size_t>(p)]] + 1);
  for (auto& [p, view] : view_of) {
    view.level = level_of.at(g.outputs[static_cast<size_t>(p)]);
    plan.views.push_back(view);
  }
  std::sort(plan.views.begin(), plan.views.end(), [](const auto& a, const auto& b) {
    return a.level != b.level ? a.level < b.level : a.position < b.position;
  });
  // Cut points of level L: the diff outputs below it and the view outputs below it, in position order.
  std::vector<int32_t> cut_candidates = diff;
  for (const auto& [p, view] : view_of) cut_candidates.push_back(p);
  std::sort(cut_candidates.begin(), cut_candidates.end());

  std::set<ValueId> all_saved;
  std::vector<std::vector<ValueId>> level_saved;
  std::vector<int32_t> diff_inputs;
  for (size_t k = 0; k < g.inputs.size(); ++k)
    if (g.meta(g.inputs[k]).requires_grad) diff_inputs.push_back(static_cast<int32_t>(k));
  for (int L = 0; L < levels; ++L) {
    runtime::AutogradPlan::Level lv;
    std::vector<ValueId> cut, seeds;
    for (int32_t p : cut_candidates) {
      const ValueId v = g.outputs[static_cast<size_t>(p)];
      if (level_of[v] < L) {
        cut.push_back(v);
        lv.edge_outputs.push_back(p);
      } else if (level_of[v] == L && !view_of.count(p)) {
        seeds.push_back(v);
        lv.outputs.push_back(p);
      }
    }
    lv.edge_inputs = diff_inputs;
    std::unordered_map<ValueId, ValueId> original;
    Graph gl = cut_at(g, cut, original);
    std::set<ValueId> returned;  // the lower levels' outputs, inputs of this level
    for (const auto& [in, out] : original) returned.insert(in);
    LevelPart part = differentiate(gl, seeds, written, returned);
    lv.edge_grad = part.edge_grad;
    // What the backward reads, and every value those are computed from: the replay's inputs among
    // them must be kept by value (runtime/autograd_plan.h replay_reads).
    std::set<ValueId> read(part.saved.begin(), part.saved.end());
    for (size_t i = gl.nodes.size(); i-- > 0;) {
      const Node& n = gl.nodes[i];
      bool feeds = false;
      for (ValueId o : n.outputs) feeds = feeds || read.count(o) != 0;
      if (feeds) for_each_value_input(n, [&](ValueId v) { read.insert(v); });
    }
    for (ValueId in : gl.inputs) lv.replay_reads.push_back(read.count(in) != 0);
    std::vector<ValueId> saved;
    for (ValueId v : part.saved) saved.push_back(original.count(v) ? original[v] : v);
    all_saved.insert(saved.begin(), saved.end());
    level_saved.push_back(std::move(saved));
    split.backward.push_back(std::move(part.backward));
    gl.outputs = seeds;
    split.eager.push_back(std::move(gl));
    plan.levels.push_back(std::move(lv));
  }
  all_saved.insert(masks.begin(), masks.end());  // the eager replays read them
  const std::vector<ValueId> saved_list(all_saved.begin(), all_saved.end());
  auto saved_index = [&](ValueId v) {
    return static_cast<int32_t>(std::find(saved_list.begin(), saved_list.end(), v) - saved_list.begin());
  };
  for (ValueId v : saved_list) {  // the runtime wires graph outputs (not inputs) to nodes: saved detached
    plan.saved_detached.push_back(!is_input(g, v) && std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end());
    int32_t written_into = -1;
    for (const loop::WriteBack& wb : functional.writebacks)
      if (wb.value == v)
        for (size_t k = 0; k < g.inputs.size(); ++k)
          if (g.inputs[k] == wb.input) written_into = static_cast<int32_t>(k);
    plan.saved_input.push_back(written_into);
  }
  for (size_t L = 0; L < plan.levels.size(); ++L) {
    for (ValueId v : level_saved[L]) plan.levels[L].saved.push_back(saved_index(v));
    for (ValueId m : masks) plan.levels[L].eager_saved.push_back(saved_index(m));
    if (!masks.empty()) split.eager[L] = replay_masks(split.eager[L], masks);
    for (Node& n : split.eager[L].nodes)  // the replay must not update running statistics a second time
      if ((n.op == OpId::batch_norm || n.op == OpId::native_batch_norm || n.op == OpId::cudnn_batch_norm) &&
          n.args.at(5).kind == Arg::Kind::Bool && n.args[5].b)
        n.args[3] = n.args[4] = Arg::none();
  }
  std::vector<ValueId> fwd_outputs = g.outputs;
  fwd_outputs.insert(fwd_outputs.end(), saved_list.begin(), saved_list.end());
  // The values written into inputs, for the copy_ nodes below (outputs past the saved ones, which
  // the runtime ignores).
  for (const loop::WriteBack& wb : functional.writebacks)
    if (std::find(fwd_outputs.begin(), fwd_outputs.end(), wb.value) == fwd_outputs.end()) fwd_outputs.push_back(wb.value);
  std::vector<size_t> fwd_nodes(g.nodes.size());
  for (size_t i = 0; i < fwd_nodes.size(); ++i) fwd_nodes[i] = i;
  split.forward = extract(g, g.inputs, fwd_nodes, fwd_outputs);
  std::unordered_map<ValueId, ValueId> fwd_id;  // g's input and written values -> the forward's
  for (size_t k = 0; k < g.inputs.size(); ++k) fwd_id[g.inputs[k]] = split.forward.inputs[k];
  for (size_t k = 0; k < fwd_outputs.size(); ++k) fwd_id[fwd_outputs[k]] = split.forward.outputs[k];
  for (const loop::WriteBack& wb : functional.writebacks) {
    const ValueId in = fwd_id.at(wb.input);
    auto v = fwd_id.find(wb.value);
    if (v == fwd_id.end()) throw InternalError("autograd split: a value written into an input is not a forward output");
    for (int32_t k = 0; k < wb.bumps; ++k) {
      const ValueId copied = split.forward.add_value(split.forward.meta(in));
      split.forward.nodes.push_back(Node{OpId::copy_, {Arg::of_value(in), Arg::of_value(v->second), Arg::of_bool(false)}, {copied}});
    }
  }
  return split;
}

}  // namespace fastdyn::codegen::autograd
