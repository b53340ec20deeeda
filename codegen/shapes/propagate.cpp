// codegen/shapes/propagate.cpp — symbolic rules keyed by ops.def's Rule column (see propagate.h).
//
// A rule computes a node's symbolic output sizes (and, for views, strides) from its inputs'
// symbolic metadata and its constant arguments, and names the symbols it must pin. Outputs that
// are not views get dense strides in the layout capture chose (the order of the concrete
// strides), so channels-last or permuted results stay what they were. Every rule is checked
// against the concrete metadata of the traced call.
#include "codegen/shapes/propagate.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <unordered_map>

#include "runtime/errors.h"

namespace fastdyn::codegen::shapes {
namespace {

using Exprs = std::vector<SizeExpr>;

// What a rule decided for one node.
struct Outcome {
  std::vector<Exprs> sizes;                 // per output; empty vector for an output left static
  std::vector<std::optional<Exprs>> strides;  // per output: set by view rules, else derived
  std::vector<std::optional<SizeExpr>> offsets;  // per output: a view's offset where a rule computes it
  std::set<SymbolId> pins;                  // symbols to specialise (the rule then runs again)
  std::vector<std::pair<SymbolId, SymbolId>> unify;  // symbols to make one (the rule then runs again)
  bool pin_all = false;                     // no rule: every symbol of every input
};

void pin_expr(Outcome& o, const SizeExpr& e) {
  for (SymbolId s : e.symbols()) o.pins.insert(s);
}
void pin_exprs(Outcome& o, const Exprs& es) {
  for (const SizeExpr& e : es) pin_expr(o, e);
}

const TensorMeta& in_meta(const Graph& g, const Node& n, size_t arg) { return g.meta(n.args.at(arg).value); }

bool is_value(const Node& n, size_t arg) { return arg < n.args.size() && n.args[arg].kind == Arg::Kind::Value; }

int64_t wrap_dim(int64_t d, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  return d < 0 ? d + r : d;
}

// The symbol e is, alone (s3; not 2*s3 or s3 + 1), or -1.
SymbolId lone_symbol(const SizeExpr& e) {
  const std::optional<SizeExpr::Linear> l = e.linear();
  return l && l->constant == 0 && l->terms.size() == 1 && l->terms[0].second == 1 ? l->terms[0].first : -1;
}

// Two sizes an op needs equal: equal expressions; two symbols of equal hints, unified (the keys
// and values of a KV cache, two inputs of one length: the guards then check them equal), also
// where the sizes differ from them by one same term (s0 + 1 and s1 + 1); or else the symbols of
// both pinned.
void require_equal(const Graph& g, Outcome& o, const SizeExpr& a, const SizeExpr& b) {
  if (a == b) return;
  SymbolId sa = lone_symbol(a), sb = lone_symbol(b);
  // s0 + 1 against s1 + 1 (two caches grown by one token each), 64*s0 against 64*s1 (a view's
  // element count): the same as s0 against s1.
  if (const std::optional<SizeExpr::Linear> d = (a - b).linear();
      d && d->constant == 0 && d->terms.size() == 2 && d->terms[0].second == -d->terms[1].second) {
    sa = d->terms[0].first;
    sb = d->terms[1].first;
  }
  if (sa >= 0 && sb >= 0) {
    const std::vector<int64_t> h = hints(g);
    if (h.at(static_cast<size_t>(sa)) == h.at(static_cast<size_t>(sb))) {
      o.unify.emplace_back(sa, sb);
      return;
    }
  }
  pin_expr(o, a);
  pin_expr(o, b);
}

// Right-aligned broadcast of the Value arguments' shapes (ATen's rule): per dim the one size
// that is not 1; different symbolic sizes there are pinned.
Exprs broadcast_shapes(const Graph& g, const std::vector<Exprs>& shapes, Outcome& o) {
  size_t rank = 0;
  for (const Exprs& s : shapes) rank = std::max(rank, s.size());
  Exprs out(rank, SizeExpr(1));
  for (size_t d = 0; d < rank; ++d) {
    std::optional<SizeExpr> chosen;
    for (const Exprs& s : shapes) {
      if (d + s.size() < rank) continue;
      const SizeExpr& e = s[d + s.size() - rank];
      if (e == SizeExpr(1)) continue;
      if (!chosen) chosen = e;
      else require_equal(g, o, *chosen, e);
    }
    if (chosen) out[d] = *chosen;
  }
  return out;
}

Exprs broadcast(const Graph& g, const Node& n, Outcome& o) {
  std::vector<Exprs> shapes;
  for (size_t a = 0; a < n.args.size(); ++a)
    if (is_value(n, a)) shapes.push_back(sizes_of(in_meta(g, n, a)));
  return broadcast_shapes(g, shapes, o);
}

void same_as(const Graph& g, const Node& n, size_t arg, Outcome& o) {
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (g.meta(n.outputs[k]).sizes != in_meta(g, n, arg).sizes) {
      o.pin_all = true;
      return;
    }
    o.sizes.push_back(sizes_of(in_meta(g, n, arg)));
  }
}

// A value's storage offset as an expression.
// ---- rules ------------------------------------------------------------------------------

void rule_pointwise(const Graph& g, const Node& n, Outcome& o) { o.sizes.push_back(broadcast(g, n, o)); }

void rule_inplace(const Graph& g, const Node& n, Outcome& o) {
  if (!is_value(n, 0)) {
    o.pin_all = true;
    return;
  }
  const Exprs self = sizes_of(in_meta(g, n, 0));
  const Exprs all = broadcast(g, n, o);
  if (all.size() != self.size()) {
    o.pin_all = true;
    return;
  }
  for (size_t d = 0; d < self.size(); ++d) require_equal(g, o, self[d], all[d]);
  o.sizes.push_back(self);
  o.strides.push_back(strides_of(in_meta(g, n, 0)));
}

// The dims a reduction's args name (its `dim` argument: an int, a list, or None/absent = all).
std::vector<bool> reduced_dims(const Node& n, int64_t rank) {
  std::vector<bool> r(static_cast<size_t>(std::max<int64_t>(rank, 0)), false);
  const size_t at = std::string(op_info(n.op).aten) == "linalg_vector_norm" ? 2 : 1;  // (self, ord, dim, ...)
  const Arg* a = n.args.size() > at ? &n.args[at] : nullptr;
  auto mark = [&](int64_t d) {
    d = wrap_dim(d, rank);
    if (d >= 0 && d < rank) r[static_cast<size_t>(d)] = true;
  };
  if (a && a->kind == Arg::Kind::Int) mark(a->i);
  else if (a && a->kind == Arg::Kind::IntList && !a->ints.empty())
    for (int64_t d : a->ints) mark(d);
  else std::fill(r.begin(), r.end(), true);
  return r;
}

void rule_reduce(const Graph& g, const Node& n, Outcome& o) {
  const TensorMeta& in = in_meta(g, n, 0);
  const Exprs s = sizes_of(in);
  const std::vector<bool> red = reduced_dims(n, in.dim());
  for (ValueId out : n.outputs) {
    const TensorMeta& m = g.meta(out);
    if (m.sizes == in.sizes) {
      // softmax, log_softmax, cumsum, cumprod; or a reduction over size-1 dims with keepdim
      o.sizes.push_back(s);
      continue;
    }
    const bool keepdim = m.dim() == in.dim();
    Exprs e;
    for (size_t d = 0; d < s.size(); ++d) {
      if (!red[d]) e.push_back(s[d]);
      else if (keepdim) e.push_back(SizeExpr(1));
    }
    if (static_cast<int64_t>(e.size()) != m.dim()) return void(o.pin_all = true);  // not this shape of reduction
    o.sizes.push_back(std::move(e));
  }
}

void rule_norm(const Graph& g, const Node& n, Outcome& o) {
  const TensorMeta& in = in_meta(g, n, 0);
  const Exprs s = sizes_of(in);
  if (n.outputs.size() != 1 || g.meta(n.outputs[0]).sizes != in.sizes) {
    o.pin_all = true;
    return;
  }
  const std::string aten = op_info(n.op).aten;
  if ((aten == "layer_norm" || aten == "rms_norm") && n.args.size() > 1 && n.args[1].kind == Arg::Kind::IntList) {
    // normalized_shape must be the trailing sizes: numbers pin them, x.shape[-1] keeps them
    const Exprs ns = ints_of(g, n.args[1]);
    const size_t k = std::min(ns.size(), s.size());
    for (size_t i = 0; i < k; ++i) require_equal(g, o, s[s.size() - k + i], ns[ns.size() - k + i]);
  } else if (s.size() > 1) {
    pin_expr(o, s[1]);  // group_norm's groups divide the channels; batch_norm's stats are per channel
  }
  for (size_t a = 1; a < n.args.size(); ++a)
    if (is_value(n, a)) pin_exprs(o, sizes_of(in_meta(g, n, a)));  // weight, bias, running stats
  o.sizes.push_back(s);
}

void rule_matmul(const Graph& g, const Node& n, Outcome& o) {
  const std::string aten = op_info(n.op).aten;
  const bool biased = aten == "addmm" || aten == "baddbmm";
  const size_t ai = biased ? 1 : 0, bi = biased ? 2 : 1;
  if (!is_value(n, ai) || !is_value(n, bi) || n.outputs.size() != 1) {
    o.pin_all = true;
    return;
  }
  const Exprs a = sizes_of(in_meta(g, n, ai)), b = sizes_of(in_meta(g, n, bi));
  Exprs out;
  if (aten == "linear") {  // x[..., k] @ w[n, k]^T
    if (a.empty() || b.size() != 2) return void(o.pin_all = true);
    require_equal(g, o, a.back(), b[1]);
    out.assign(a.begin(), a.end() - 1);
    out.push_back(b[0]);
    if (is_value(n, 2)) pin_exprs(o, sizes_of(in_meta(g, n, 2)));  // bias
  } else if (a.size() >= 2 && b.size() >= 2 && (aten == "mm" || aten == "bmm" || aten == "matmul" || biased)) {
    require_equal(g, o, a.back(), b[b.size() - 2]);
    // batch dims broadcast (bmm/baddbmm: equal)
    const size_t ba = a.size() - 2, bb = b.size() - 2, rank = std::max(ba, bb);
    for (size_t d = 0; d < rank; ++d) {
      const SizeExpr x = d + ba >= rank ? a[d + ba - rank] : SizeExpr(1);
      const SizeExpr y = d + bb >= rank ? b[d + bb - rank] : SizeExpr(1);
      if (x == SizeExpr(1)) out.push_back(y);
      else if (y == SizeExpr(1)) out.push_back(x);
      else {
        require_equal(g, o, x, y);
        out.push_back(x);
      }
    }
    out.push_back(a[a.size() - 2]);
    out.push_back(b.back());
    if (biased) pin_exprs(o, sizes_of(in_meta(g, n, 0)));  // the added term
  } else {
    o.pin_all = true;
    return;
  }
  o.sizes.push_back(std::move(out));
}

// scaled_dot_product_attention(q, k, v, attn_mask, ...): q's sizes with v's last; the head dims
// of q and k, the key lengths of k and v, and the batch dims agree; a mask broadcasts to
// [..., L, S].
void rule_attention(const Graph& g, const Node& n, Outcome& o) {
  if (!is_value(n, 0) || !is_value(n, 1) || !is_value(n, 2) || n.outputs.size() != 1) return void(o.pin_all = true);
  const Exprs q = sizes_of(in_meta(g, n, 0)), k = sizes_of(in_meta(g, n, 1)), v = sizes_of(in_meta(g, n, 2));
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) return void(o.pin_all = true);
  const size_t r = q.size();
  require_equal(g, o, q[r - 1], k[r - 1]);
  require_equal(g, o, k[r - 2], v[r - 2]);
  for (size_t d = 0; d + 2 < r; ++d) {
    require_equal(g, o, q[d], k[d]);
    require_equal(g, o, k[d], v[d]);
  }
  if (is_value(n, 3)) {
    const Exprs m = sizes_of(in_meta(g, n, 3));
    Exprs target(q.begin(), q.end() - 1);
    target.push_back(k[r - 2]);
    for (size_t d = 0; d < m.size() && d < target.size(); ++d) {
      const SizeExpr& md = m[m.size() - 1 - d];
      if (md != SizeExpr(1)) require_equal(g, o, md, target[target.size() - 1 - d]);
    }
  }
  Exprs out(q.begin(), q.end() - 1);
  out.push_back(v[r - 1]);
  o.sizes.push_back(std::move(out));
}

// cat(tensors, dim): the sizes along dim add up, the others agree; stack(tensors, dim): a new
// dim of the number of tensors. Legacy empty 1-d inputs ([0]) are skipped, as ATen does.
void rule_join(const Graph& g, const Node& n, Outcome& o) {
  if (n.args.empty() || n.args[0].kind != Arg::Kind::ValueList || n.outputs.size() != 1) return void(o.pin_all = true);
  const bool stack = std::string(op_info(n.op).aten) == "stack";
  std::vector<Exprs> parts;
  for (ValueId v : n.args[0].values) {
    const TensorMeta& m = g.meta(v);
    if (!stack && m.dim() == 1 && m.sizes[0] == 0) continue;
    parts.push_back(sizes_of(m));
  }
  if (parts.empty()) return void(o.pin_all = true);
  const size_t rank = parts[0].size();
  const int64_t dim = n.args.size() > 1 && n.args[1].kind == Arg::Kind::Int ? wrap_dim(n.args[1].i, static_cast<int64_t>(rank) + (stack ? 1 : 0)) : 0;
  Exprs out = parts[0];
  for (size_t p = 1; p < parts.size(); ++p) {
    if (parts[p].size() != rank) return void(o.pin_all = true);
    for (size_t d = 0; d < rank; ++d) {
      if (!stack && static_cast<int64_t>(d) == dim) out[d] = out[d] + parts[p][d];
      else require_equal(g, o, out[d], parts[p][d]);
    }
  }
  if (stack) out.insert(out.begin() + dim, SizeExpr(static_cast<int64_t>(parts.size())));
  o.sizes.push_back(std::move(out));
}

void rule_embedding(const Graph& g, const Node& n, Outcome& o) {
  if (!is_value(n, 0) || !is_value(n, 1)) return void(o.pin_all = true);
  const Exprs w = sizes_of(in_meta(g, n, 0));
  Exprs out = sizes_of(in_meta(g, n, 1));
  if (w.size() != 2) return void(o.pin_all = true);
  pin_expr(o, w[0]);
  out.push_back(w[1]);
  o.sizes.push_back(std::move(out));
}

// x[i, j] with integer index tensors (aten::index.Tensor; -1 in the list is a None, a full dim):
// the indices broadcast together; their shape replaces the indexed dims where those are adjacent,
// and leads otherwise (ATen's rule). Boolean masks give data-dependent sizes: pinned.
void rule_index(const Graph& g, const Node& n, Outcome& o) {
  if (!is_value(n, 0) || n.args.size() < 2 || n.args[1].kind != Arg::Kind::ValueList) return void(o.pin_all = true);
  const Exprs self = sizes_of(in_meta(g, n, 0));
  const std::vector<ValueId>& idx = n.args[1].values;
  std::vector<Exprs> shapes;
  int64_t first = -1, last = -1;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k] < 0) continue;
    const c10::ScalarType t = g.meta(idx[k]).dtype;
    if (t == c10::ScalarType::Bool || t == c10::ScalarType::Byte) return void(o.pin_all = true);
    shapes.push_back(sizes_of(g.meta(idx[k])));
    if (first < 0) first = static_cast<int64_t>(k);
    last = static_cast<int64_t>(k);
  }
  if (first < 0 || idx.size() > self.size()) return void(o.pin_all = true);
  bool adjacent = true;
  for (int64_t k = first; k <= last; ++k) adjacent = adjacent && idx[static_cast<size_t>(k)] >= 0;
  const Exprs b = broadcast_shapes(g, shapes, o);
  Exprs out;
  if (adjacent) {
    out.insert(out.end(), self.begin(), self.begin() + first);
    out.insert(out.end(), b.begin(), b.end());
    out.insert(out.end(), self.begin() + last + 1, self.end());
  } else {
    out = b;
    for (size_t k = 0; k < self.size(); ++k)
      if (k >= idx.size() || idx[k] < 0) out.push_back(self[k]);
  }
  o.sizes.push_back(std::move(out));
}

void rule_same_shape(const Graph& g, const Node& n, Outcome& o) {
  if (!is_value(n, 0)) return void(o.pin_all = true);
  for (size_t a = 1; a < n.args.size(); ++a)
    if (is_value(n, a)) pin_exprs(o, sizes_of(in_meta(g, n, a)));
  same_as(g, n, 0, o);
}

void rule_factory(const Graph& g, const Node& n, Outcome& o) {
  // zeros(size), full(size, v), new_ones(self, size) & co.: the sizes given, row-major. (No
  // other factory row takes an int[].)
  for (const Arg& a : n.args)
    if (a.kind == Arg::Kind::IntList) {
      o.sizes.push_back(ints_of(g, a));
      o.strides.emplace_back(contiguous_strides(o.sizes.back()));
      return;
    }
  for (size_t a = 0; a < n.args.size(); ++a)
    if (is_value(n, a)) return same_as(g, n, a, o);  // zeros_like & co.
  // arange(start, end, step) over sizes (torch.arange(x.shape[1])): ints with a positive step
  // have ceil((end - start) / step) elements.
  if (std::string(op_info(n.op).id) == "arange_start_step" && n.args.size() >= 3) {
    const Arg &b = n.args[0], &e = n.args[1], &st = n.args[2];
    if (b.kind == Arg::Kind::Int && e.kind == Arg::Kind::Int && st.kind == Arg::Kind::Int && st.sym_ints.empty() && st.i > 0) {
      auto expr = [&](const Arg& a) { return a.sym_ints.size() == 1 ? live(g, a.sym_ints[0]) : SizeExpr(a.i); };
      o.sizes.push_back({floordiv(expr(e) - expr(b) + SizeExpr(st.i - 1), SizeExpr(st.i))});
      return;
    }
  }
  o.pin_all = true;
}

// Views: sizes and strides. Dims whose size is static and whose stride is constant can be
// sliced, split or selected with the traced offsets; anything else along a symbolic dim pins.
// ATen's computeStride over expressions: the strides of a view of `sizes` to `shape` over a
// tensor of `strides`, or nullopt where the dims cannot be regrouped at every size. Chunks of
// input dims that are row-major among themselves (decided structurally, so at every size) map to
// runs of view dims of the same element count (checked structurally at each chunk's end); how
// many view dims a chunk takes is read at the traced sizes, and the count check makes it right
// at any other.
std::optional<Exprs> view_strides(const Graph& g, const Exprs& sizes, const Exprs& strides, const Exprs& shape) {
  const std::vector<int64_t> h = hints(g);
  auto at = [&](const SizeExpr& e) { return e.evaluate(h).value_or(-1); };
  Exprs out(shape.size(), SizeExpr(0));
  if (sizes.empty()) return std::nullopt;
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  SizeExpr chunk_base = strides.back(), tensor_numel(1), view_numel(1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel = tensor_numel * sizes[static_cast<size_t>(d)];
    const bool chunk_ends = d == 0 || (sizes[static_cast<size_t>(d - 1)] != SizeExpr(1) &&
                                       strides[static_cast<size_t>(d - 1)] != tensor_numel * chunk_base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (at(view_numel) < at(tensor_numel) || shape[static_cast<size_t>(view_d)] == SizeExpr(1))) {
      out[static_cast<size_t>(view_d)] = view_numel * chunk_base;
      view_numel = view_numel * shape[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base = strides[static_cast<size_t>(d - 1)];
      tensor_numel = SizeExpr(1);
      view_numel = SizeExpr(1);
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

void rule_view(const Graph& g, const Node& n, Outcome& o) {
  if (!is_value(n, 0)) return void(o.pin_all = true);
  const TensorMeta& in = in_meta(g, n, 0);
  const Exprs s = sizes_of(in), st = strides_of(in);
  const int64_t rank = in.dim();
  const std::string aten = op_info(n.op).aten;
  const std::string id = op_info(n.op).id;
  auto emit = [&](Exprs sz, Exprs sd) {
    o.sizes.push_back(std::move(sz));
    o.strides.emplace_back(std::move(sd));
  };
  if (id == "alias" || id == "detach") return emit(s, st);
  if (id == "transpose_int") {
    const int64_t a = wrap_dim(n.args[1].i, rank), b = wrap_dim(n.args[2].i, rank);
    Exprs sz = s, sd = st;
    if (rank > 0) {
      std::swap(sz[static_cast<size_t>(a)], sz[static_cast<size_t>(b)]);
      std::swap(sd[static_cast<size_t>(a)], sd[static_cast<size_t>(b)]);
    }
    return emit(sz, sd);
  }
  if (id == "permute") {
    Exprs sz, sd;
    for (int64_t d : n.args[1].ints) {
      const auto k = static_cast<size_t>(wrap_dim(d, rank));
      sz.push_back(s.at(k));
      sd.push_back(st.at(k));
    }
    return emit(sz, sd);
  }
  if (id == "unsqueeze") {
    const auto d = static_cast<size_t>(wrap_dim(n.args[1].i, rank + 1));
    Exprs sz = s, sd = st;
    sz.insert(sz.begin() + static_cast<std::ptrdiff_t>(d), SizeExpr(1));
    sd.insert(sd.begin() + static_cast<std::ptrdiff_t>(d), d < s.size() ? s[d] * st[d] : SizeExpr(1));
    return emit(sz, sd);
  }
  if (aten == "squeeze") {  // only size-1 dims go, and those are static
    std::vector<bool> drop(s.size(), false);
    for (size_t d = 0; d < s.size(); ++d) drop[d] = in.sizes[d] == 1 && s[d] == SizeExpr(1);
    if (id == "squeeze_dim" || id == "squeeze_dims") {
      std::vector<bool> named(s.size(), false);
      if (n.args[1].kind == Arg::Kind::Int) named[static_cast<size_t>(wrap_dim(n.args[1].i, rank))] = rank > 0;
      for (int64_t d : n.args[1].ints) named[static_cast<size_t>(wrap_dim(d, rank))] = true;
      for (size_t d = 0; d < s.size(); ++d) drop[d] = drop[d] && named[d];
    }
    Exprs sz, sd;
    for (size_t d = 0; d < s.size(); ++d)
      if (!drop[d]) {
        sz.push_back(s[d]);
        sd.push_back(st[d]);
      }
    return emit(sz, sd);
  }
  if (id == "expand") {
    const std::vector<int64_t>& target = n.args[1].ints;
    const Exprs t = ints_of(g, n.args[1]);  // the target's expressions (numbers or sizes)
    const size_t shift = target.size() - s.size();
    Exprs sz, sd;
    for (size_t d = 0; d < target.size(); ++d) {
      const bool old = d >= shift;
      if (target[d] == -1) {
        sz.push_back(s[d - shift]);
        sd.push_back(st[d - shift]);
      } else if (old && s[d - shift] != SizeExpr(1)) {  // kept: it must be the target's size
        require_equal(g, o, s[d - shift], t[d]);
        sz.push_back(s[d - shift]);
        sd.push_back(st[d - shift]);
      } else {  // a new dim, or a dim of 1 broadcast to the target
        sz.push_back(t[d]);
        sd.push_back(old && in.sizes[d - shift] == target[d] ? st[d - shift] : SizeExpr(0));
      }
    }
    return emit(sz, sd);
  }
  if (id == "view") {
    const SizeExpr numel = numel_of(s);
    SizeExpr known(1);
    int infer = -1;
    const std::vector<int64_t>& shape = n.args[1].ints;
    Exprs sz = ints_of(g, n.args[1]);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == -1 && sz[d] == SizeExpr(-1)) infer = static_cast<int>(d);
      else known = known * sz[d];
    }
    if (infer >= 0) {
      const SizeExpr q = floordiv(numel, known);
      if (q * known != numel) return void(o.pin_all = true);  // not an exact quotient symbolically
      sz[static_cast<size_t>(infer)] = q;
    } else if (known != numel) {
      // the shape is numbers or other symbols: one symbol for both where that makes them equal,
      // else the sizes of both are what they were
      require_equal(g, o, numel, known);
      return emit(sz, contiguous_strides(sz));
    }
    if (contiguous_strides(s) == st) return emit(sz, contiguous_strides(sz));
    // A strided input (one part of a split, a transposed tensor): the view regroups its dims
    // chunk by chunk, as ATen's computeStride does, where each chunk is row-major within.
    if (std::optional<Exprs> vs = view_strides(g, s, st, sz)) return emit(sz, *vs);
    return void(o.pin_all = true);
  }
  // Slicing, splitting and selecting along a static dim with a constant stride keep the other
  // dims' symbols (offsets and the sliced dim are the traced call's numbers).
  const bool sliced = id == "slice_Tensor" || id == "select_int" || id == "split_Tensor" || id == "split_with_sizes" ||
                      id == "unbind_int" || id == "tensor_split_sections" || id == "tensor_split_indices";
  if (sliced && n.args.size() > 1) {
    const Arg& dim_arg = id == "split_Tensor" || id == "split_with_sizes" || id == "tensor_split_sections" || id == "tensor_split_indices"
                             ? n.args.at(2)
                             : n.args.at(1);
    const int64_t d = wrap_dim(dim_arg.kind == Arg::Kind::Int ? dim_arg.i : 0, rank);
    if (d < 0 || d >= rank) return void(o.pin_all = true);
    const auto k = static_cast<size_t>(d);
    // x[:, 0:] / x[:, :] along a symbolic dim (logits_to_keep=0): the whole dim, the same sizes.
    auto whole = [&]() {
      if (id != "slice_Tensor" || n.args.size() < 5) return false;
      const Arg &b = n.args[2], &e = n.args[3], &step = n.args[4];
      const bool from_start = b.kind == Arg::Kind::None || (b.kind == Arg::Kind::Int && b.i == 0 && b.sym_ints.empty());
      const bool to_end = e.kind == Arg::Kind::None || (e.kind == Arg::Kind::Int && e.i >= (int64_t{1} << 62) && e.sym_ints.empty());
      return from_start && to_end && step.kind == Arg::Kind::Int && step.i == 1;
    };
    if (!s[k].is_constant() && whole()) return emit(s, st);
    // A slice with step 1 along a symbolic dim: bounds that clamp alike at every admitted size
    // (each symbol is 2 or more) give a symbolic length: x[:, 1:], x[:, :-1], x[:, :1].
    if (id == "slice_Tensor" && !s[k].is_constant() && n.args.size() >= 5 && n.args[4].kind == Arg::Kind::Int &&
        n.args[4].i == 1 && n.args[2].sym_ints.empty() && n.args[3].sym_ints.empty()) {
      constexpr int64_t kMin = 2;  // the least size a symbol takes (guards)
      const Arg &b = n.args[2], &e = n.args[3];
      std::optional<SizeExpr> begin, end;
      if (b.kind == Arg::Kind::None) begin = SizeExpr(0);
      else if (b.kind == Arg::Kind::Int && b.i >= 0 && b.i <= kMin) begin = SizeExpr(b.i);
      else if (b.kind == Arg::Kind::Int && b.i < 0 && -b.i <= kMin) begin = s[k] + SizeExpr(b.i);  // x[:, -1:]
      if (e.kind == Arg::Kind::None || (e.kind == Arg::Kind::Int && e.i >= (int64_t{1} << 62))) end = s[k];
      else if (e.kind == Arg::Kind::Int && e.i >= 0 && e.i <= kMin) end = SizeExpr(e.i);
      else if (e.kind == Arg::Kind::Int && e.i < 0 && -e.i <= kMin) end = s[k] + SizeExpr(e.i);
      if (begin && end) {
        Exprs sz = s;
        sz[k] = *end - *begin;
        emit(sz, st);
        o.offsets.resize(1);
        o.offsets[0] = in.offset_expr() + *begin * st[k];  // a symbol when begin or the stride is one
        return;
      }
    }
    // x[:, -1] (the last token) and x[:, 0] along a symbolic dim: the index is in range at every
    // admitted size; the offset follows it.
    if (id == "select_int" && !s[k].is_constant() && n.args.size() > 2 && n.args[2].kind == Arg::Kind::Int &&
        n.args[2].sym_ints.empty() && n.args[2].i >= -2 && n.args[2].i < 2) {
      const SizeExpr index = n.args[2].i < 0 ? s[k] + SizeExpr(n.args[2].i) : SizeExpr(n.args[2].i);
      Exprs sz = s, sd = st;
      sz.erase(sz.begin() + d);
      sd.erase(sd.begin() + d);
      emit(sz, sd);
      o.offsets.resize(1);
      o.offsets[0] = in.offset_expr() + index * st[k];
      return;
    }
    if (!s[k].is_constant() || !st[k].is_constant()) {
      pin_expr(o, s[k]);
      pin_expr(o, st[k]);
    }
    for (ValueId out : n.outputs) {
      const TensorMeta& m = g.meta(out);
      Exprs sz = s, sd = st;
      if (id == "select_int" || id == "unbind_int") {
        sz.erase(sz.begin() + d);
        sd.erase(sd.begin() + d);
      } else {
        sz[k] = SizeExpr(m.sizes.at(k));
        if (id == "slice_Tensor" && n.args.size() > 4 && n.args[4].kind == Arg::Kind::Int) sd[k] = st[k] * SizeExpr(n.args[4].i);
      }
      emit(sz, sd);
    }
    return;
  }
  o.pin_all = true;
}

using Rule = void (*)(const Graph&, const Node&, Outcome&);

// ops.def's Rule column -> the symbolic rule. A Rule name missing here has none: its nodes pin.
const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = {
      {"Unary", rule_pointwise},     {"Binary", rule_pointwise},     {"Ternary", rule_pointwise},
      {"Where", rule_pointwise},     {"Clamp", rule_pointwise},      {"MaskedFill", rule_pointwise},
      {"InPlace", rule_inplace},     {"Reduce", rule_reduce},        {"Norm", rule_norm},
      {"Matmul", rule_matmul},       {"Embedding", rule_embedding},  {"Dropout", rule_same_shape},
      {"Layout", rule_same_shape},   {"Factory", rule_factory},      {"View", rule_view},
      {"Attention", rule_attention}, {"Join", rule_join},           {"Index", rule_index},
  };
  return table;
}

// Dense strides for `sizes` in the order of the concrete strides (outermost first; ties keep
// dim order), which is the layout capture chose for the output.
Exprs dense_like(const Exprs& sizes, const TensorMeta& m) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return m.strides[a] > m.strides[b]; });
  Exprs st(sizes.size(), SizeExpr(1));
  SizeExpr run(1);
  for (size_t k = order.size(); k-- > 0;) {
    st[order[k]] = run;
    run = run * sizes[order[k]];
  }
  return st;
}

bool any_symbolic_input(const Graph& g, const Node& n) {
  for (const Arg& a : n.args) {
    for (const SizeExpr& e : a.sym_ints)
      if (!live(g, e).is_constant()) return true;
    if (a.kind == Arg::Kind::Value && a.value >= 0 && g.meta(a.value).symbolic()) return true;
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId v : a.values)
        if (v >= 0 && g.meta(v).symbolic()) return true;
  }
  return false;
}

void pin_inputs(Graph& g, const Node& n, const std::string& why) {
  for (const Arg& a : n.args) {
    for (const SizeExpr& e : a.sym_ints)
      for (SymbolId s : e.symbols()) pin(g, s, why);
    if (a.kind == Arg::Kind::Value && a.value >= 0) pin_value(g, a.value, -1, why);
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId v : a.values)
        if (v >= 0) pin_value(g, v, -1, why);
  }
}

std::string exprs_text(const Exprs& es) {
  std::string s = "[";
  for (size_t i = 0; i < es.size(); ++i) s += (i ? ", " : "") + es[i].str();
  return s + "]";
}

// Sets symbolic metadata on the node's outputs; false when the rule asked for pins (applied).
bool apply_rule(Graph& g, const Node& n) {
  if (!any_symbolic_input(g, n)) return true;
  Outcome o;
  const auto& table = rules();
  auto it = table.find(op_info(n.op).rule);
  if (it == table.end()) o.pin_all = true;
  else it->second(g, n, o);
  std::string why = qualified_name(n.op) + (o.pin_all ? " has no symbolic rule for these inputs" : " needs these sizes equal or as numbers");
  if (is_value(n, 0))  // what it was given: the first input's sizes and strides
    why += " (" + exprs_text(sizes_of(in_meta(g, n, 0))) + "{" + exprs_text(strides_of(in_meta(g, n, 0))).substr(1) + ")";
  if (o.pin_all || o.sizes.size() != n.outputs.size()) {
    pin_inputs(g, n, why);
    return false;
  }
  if (!o.unify.empty() && o.pins.empty()) {
    for (const auto& [a, b] : o.unify) unify(g, a, b);
    return false;
  }
  if (!o.pins.empty()) {
    bool any = false;
    for (SymbolId s : o.pins) {
      any = any || !g.symbols.at(static_cast<size_t>(s)).pinned;
      pin(g, s, why);
    }
    if (!any) throw InternalError("symbolic rule " + std::string(op_info(n.op).rule) + " for " + qualified_name(n.op) + " named only pinned sizes");
    return false;
  }
  const std::vector<int64_t> h = hints(g);
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    TensorMeta& m = g.values[static_cast<size_t>(n.outputs[k])];
    Exprs sz = o.sizes[k];
    bool ok = sz.size() == m.sizes.size();
    Exprs sd = k < o.strides.size() && o.strides[k] ? *o.strides[k] : ok ? dense_like(sz, m) : Exprs();
    ok = ok && sd.size() == m.sizes.size();
    for (size_t d = 0; ok && d < sz.size(); ++d) {
      ok = sz[d].evaluate(h) == m.sizes[d];
      // A stride matters only along a dim of more than one element.
      if (ok && m.sizes[d] > 1) ok = sd[d].evaluate(h) == m.strides[d];
    }
    // The storage offset: the rule's, or for a view (and an in-place op's result) its base's
    // moved by what the traced call moved it (a number: rules that move it by a size say so).
    SizeExpr off(m.storage_offset);
    if (k < o.offsets.size() && o.offsets[k]) off = *o.offsets[k];
    else if ((op_info(n.op).category == OpCategory::View || op_info(n.op).category == OpCategory::InPlace) && is_value(n, 0))
      off = in_meta(g, n, 0).offset_expr() + SizeExpr(m.storage_offset - in_meta(g, n, 0).storage_offset);
    ok = ok && off.evaluate(h) == m.storage_offset;
    if (!ok)
      throw InternalError("symbolic shape rule " + std::string(op_info(n.op).rule) + " for " + qualified_name(n.op) + " gave sizes " +
                          exprs_text(sz) + " strides " + exprs_text(sd) + " offset " + off.str() + " where the traced call has " +
                          print_node(g, n));
    bool symbolic = !off.is_constant();
    for (const SizeExpr& e : sz) symbolic = symbolic || !e.is_constant();
    for (const SizeExpr& e : sd) symbolic = symbolic || !e.is_constant();
    m.sym_offset.clear();
    if (symbolic) {
      m.sym_sizes = std::move(sz);
      m.sym_strides = std::move(sd);
      if (!off.is_constant()) m.sym_offset = {std::move(off)};
    } else {
      m.sym_sizes.clear();
      m.sym_strides.clear();
    }
  }
  return true;
}

}  // namespace

SymbolId root(const Graph& g, SymbolId s) {
  while (g.symbols.at(static_cast<size_t>(s)).same_as >= 0) s = g.symbols[static_cast<size_t>(s)].same_as;
  return s;
}

SizeExpr live(const Graph& g, const SizeExpr& e) {
  if (e.is_constant()) return e;
  bool changes = false;
  for (SymbolId s : e.symbols()) {
    const SymbolSource& src = g.symbols.at(static_cast<size_t>(s));
    changes = changes || src.pinned || src.same_as >= 0;
  }
  if (!changes) return e;
  const std::vector<int64_t> h = hints(g);
  return e.substitute([&](SymbolId s) {
    const SymbolId r = root(g, s);
    return g.symbols.at(static_cast<size_t>(r)).pinned ? SizeExpr(h.at(static_cast<size_t>(r))) : SizeExpr::symbol(r);
  });
}

std::vector<SizeExpr> ints_of(const Graph& g, const Arg& a) {
  if (a.sym_ints.size() != a.ints.size()) return Exprs(a.ints.begin(), a.ints.end());
  Exprs out;
  for (const SizeExpr& e : a.sym_ints) out.push_back(live(g, e));
  return out;
}

bool takes_symbolic_ints(Family f) {
  switch (f) {
    case Family::view:
    case Family::reshape:
    case Family::layer_norm:
    case Family::rms_norm:
    case Family::arange:
    case Family::zeros:
    case Family::ones:
    case Family::empty:
    case Family::full:
    case Family::new_zeros:
    case Family::new_ones:
    case Family::new_empty:
    case Family::new_full:
    case Family::expand:
    case Family::broadcast_to:
    // A scalar operand passes through to the node (meta_rules.h's scalar_arg): its value does
    // not shape the output, and these binders decide nothing from it.
    case Family::add:
    case Family::sub:
    case Family::mul:
    case Family::rsub:
    case Family::div:
    case Family::true_divide:
    case Family::truediv:
    case Family::floor_divide:
    case Family::remainder:
    case Family::op_eq:
    case Family::op_ne:
    case Family::op_lt:
    case Family::op_le:
    case Family::op_gt:
    case Family::op_ge:
    case Family::eq:
    case Family::ne:
    case Family::lt:
    case Family::le:
    case Family::gt:
    case Family::ge:
    case Family::add_:
    case Family::sub_:
    case Family::mul_:
      return true;
    default:
      return false;
  }
}

namespace {
void pin_call_arg(Graph& g, CallArg& a, const std::string& why) {
  for (const SizeExpr& e : a.sym)
    for (SymbolId s : e.symbols()) pin(g, s, why);
  a.sym.clear();
  for (CallArg& i : a.items) pin_call_arg(g, i, why);
}
}  // namespace

void pin_call_args(Graph& g, std::vector<CallArg>& args, std::vector<std::pair<std::string, CallArg>>& kwargs,
                   const std::string& why) {
  for (CallArg& a : args) pin_call_arg(g, a, why);
  for (auto& [name, a] : kwargs) pin_call_arg(g, a, why);
}

std::vector<SizeExpr> sizes_of(const TensorMeta& m) {
  if (m.symbolic()) return m.sym_sizes;
  return Exprs(m.sizes.begin(), m.sizes.end());
}

std::vector<SizeExpr> strides_of(const TensorMeta& m) {
  if (m.symbolic()) return m.sym_strides;
  return Exprs(m.strides.begin(), m.strides.end());
}

SizeExpr numel_of(const std::vector<SizeExpr>& sizes) {
  SizeExpr n(1);
  for (const SizeExpr& e : sizes) n = n * e;
  return n;
}

std::vector<SizeExpr> contiguous_strides(const std::vector<SizeExpr>& sizes) {
  Exprs st(sizes.size(), SizeExpr(1));
  SizeExpr run(1);
  for (size_t d = sizes.size(); d-- > 0;) {
    st[d] = run;
    run = run * sizes[d];
  }
  return st;
}

bool make_dynamic(Graph& g, size_t input, int64_t dim) {
  TensorMeta& m = g.values.at(static_cast<size_t>(g.inputs.at(input)));
  if (dim < 0 || dim >= m.dim() || m.sizes[static_cast<size_t>(dim)] < 2) return false;
  Exprs sizes = sizes_of(m);
  if (contiguous_strides(sizes) != strides_of(m) && !m.symbolic()) {
    // A layout that is not row-major keeps its sizes static (its strides would be symbols too).
    std::vector<int64_t> c(m.sizes.size(), 1);
    for (size_t d = m.sizes.size(); d-- > 1;) c[d - 1] = c[d] * m.sizes[d];
    for (size_t d = 0; d < c.size(); ++d)
      if (m.sizes[d] > 1 && c[d] != m.strides[d]) return false;
  }
  if (!sizes[static_cast<size_t>(dim)].is_constant()) return true;
  const auto id = static_cast<SymbolId>(g.symbols.size());
  g.symbols.push_back(SymbolSource{static_cast<int32_t>(input), static_cast<int32_t>(dim), false});
  sizes[static_cast<size_t>(dim)] = SizeExpr::symbol(id);
  m.sym_sizes = sizes;
  m.sym_strides = contiguous_strides(sizes);
  return true;
}

void propagate(Graph& g, size_t first_node) {
  if (!is_dynamic(g)) return;
  for (size_t k = first_node; k < g.nodes.size(); ++k) {
    // Each pin removes a symbol, so this loop runs at most #symbols + 1 times per node.
    for (size_t tries = 0; tries <= g.symbols.size() && !apply_rule(g, g.nodes[k]); ++tries) {
    }
  }
}

namespace {
// Every symbolic meta of g with `by` applied; metas left with constants only become static.
void substitute_metas(Graph& g, const std::function<SizeExpr(SymbolId)>& by) {
  for (TensorMeta& m : g.values) {
    if (!m.symbolic()) continue;
    bool still = false;
    for (SizeExpr& e : m.sym_sizes) {
      e = e.substitute(by);
      still = still || !e.is_constant();
    }
    for (SizeExpr& e : m.sym_strides) {
      e = e.substitute(by);
      still = still || !e.is_constant();
    }
    for (SizeExpr& e : m.sym_offset) e = e.substitute(by);
    if (!m.sym_offset.empty() && m.sym_offset[0].is_constant()) m.sym_offset.clear();
    still = still || !m.sym_offset.empty();
    if (!still) {
      m.sym_sizes.clear();
      m.sym_strides.clear();
    }
  }
}
}  // namespace

void pin(Graph& g, SymbolId s, const std::string& why) {
  if (s < 0 || static_cast<size_t>(s) >= g.symbols.size()) return;
  if (g.symbols[static_cast<size_t>(s)].same_as >= 0 && g.symbols[static_cast<size_t>(s)].why.empty())
    g.symbols[static_cast<size_t>(s)].why = why;
  s = root(g, s);  // a unified symbol is its root: pinning it pins the root
  if (g.symbols[static_cast<size_t>(s)].pinned) return;
  const int64_t hint = hints(g)[static_cast<size_t>(s)];
  g.symbols[static_cast<size_t>(s)].pinned = true;
  g.symbols[static_cast<size_t>(s)].why = why;
  substitute_metas(g, [&](SymbolId id) { return id == s ? SizeExpr(hint) : SizeExpr::symbol(id); });
}

void unify(Graph& g, SymbolId a, SymbolId b) {
  a = root(g, a);
  b = root(g, b);
  if (a == b) return;
  const std::vector<int64_t> h = hints(g);
  if (g.symbols[static_cast<size_t>(a)].pinned || g.symbols[static_cast<size_t>(b)].pinned ||
      h.at(static_cast<size_t>(a)) != h.at(static_cast<size_t>(b)))
    throw InternalError("unify: s" + std::to_string(a) + " and s" + std::to_string(b) + " are not two live symbols of one size");
  const SymbolId keep = std::min(a, b), drop = std::max(a, b);
  g.symbols[static_cast<size_t>(drop)].same_as = keep;
  substitute_metas(g, [&](SymbolId id) { return SizeExpr::symbol(id == drop ? keep : id); });
}

void pin_value(Graph& g, ValueId v, int64_t dim, const std::string& why) {
  const TensorMeta& m = g.meta(v);
  if (!m.symbolic()) return;
  std::set<SymbolId> found;
  for (size_t d = 0; d < m.sym_sizes.size(); ++d) {
    if (dim >= 0 && static_cast<int64_t>(d) != dim) continue;
    for (SymbolId s : m.sym_sizes[d].symbols()) found.insert(s);
    if (dim < 0)
      for (SymbolId s : m.sym_strides[d].symbols()) found.insert(s);
  }
  for (SymbolId s : found) pin(g, s, why);
}

std::vector<std::string> describe_pins(const Graph& g, const std::vector<std::string>& input_names) {
  std::vector<std::string> out;
  for (size_t k = 0; k < g.symbols.size(); ++k) {
    const SymbolSource& s = g.symbols[k];
    if (!g.symbols.at(static_cast<size_t>(root(g, static_cast<SymbolId>(k)))).pinned) continue;
    const std::string name = static_cast<size_t>(s.input) < input_names.size() ? input_names[static_cast<size_t>(s.input)] : "input " + std::to_string(s.input);
    out.push_back(name + " dim " + std::to_string(s.dim) + " (s" + std::to_string(k) + ") is specialised: " + (s.why.empty() ? "?" : s.why));
  }
  return out;
}

bool is_live(const Graph& g, SymbolId s) {
  const SymbolSource& src = g.symbols.at(static_cast<size_t>(s));
  return !src.pinned && src.same_as < 0;
}

bool is_dynamic(const Graph& g) {
  for (size_t k = 0; k < g.symbols.size(); ++k)
    if (is_live(g, static_cast<SymbolId>(k))) return true;
  return false;
}

std::vector<int64_t> hints(const Graph& g) {
  std::vector<int64_t> h;
  h.reserve(g.symbols.size());
  for (const SymbolSource& s : g.symbols)
    h.push_back(g.meta(g.inputs.at(static_cast<size_t>(s.input))).sizes.at(static_cast<size_t>(s.dim)));
  return h;
}

Graph specialize(const Graph& g, const std::vector<int64_t>& binding) {
  Graph out = g;
  out.symbols.clear();
  for (TensorMeta& m : out.values) {
    if (!m.symbolic()) continue;
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      const std::optional<int64_t> sz = m.sym_sizes[d].evaluate(binding), st = m.sym_strides[d].evaluate(binding);
      if (!sz || !st) throw InternalError("specialize: size " + m.sym_sizes[d].str() + " or stride " + m.sym_strides[d].str() + " cannot be evaluated");
      m.sizes[d] = *sz;
      m.strides[d] = *st;
    }
    if (!m.sym_offset.empty()) {
      const std::optional<int64_t> off = m.sym_offset[0].evaluate(binding);
      if (!off) throw InternalError("specialize: storage offset " + m.sym_offset[0].str() + " cannot be evaluated");
      m.storage_offset = *off;
    }
  }
  out.binding = binding;
  // Size arguments (a view's shape from x.shape, arange's end...) take the call's values too.
  for (Node& n : out.nodes)
    for (Arg& a : n.args) {
      if (a.sym_ints.empty()) continue;
      for (size_t i = 0; i < a.sym_ints.size(); ++i) {
        const std::optional<int64_t> v = live(g, a.sym_ints[i]).evaluate(binding);
        if (!v) throw InternalError("specialize: size argument " + a.sym_ints[i].str() + " cannot be evaluated");
        if (a.kind == Arg::Kind::Int) a.i = *v;
        else a.ints.at(i) = *v;
      }
      a.sym_ints.clear();
    }
  return out;
}

}  // namespace fastdyn::codegen::shapes
