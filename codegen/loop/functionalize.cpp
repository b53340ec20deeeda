// codegen/loop/functionalize.cpp — functionalize: in-place ops become out-of-place ones plus
// write-backs into the graph inputs they mutate (see passes.h).
//
// Every value an in-place op returns aliases its `self`; the values that share one storage form a
// class named by its root (the first value of the chain). Reads after a mutation read the class's
// latest functional version, reads before it the older one, so the rewritten graph has no aliasing
// left and the fusion scheduler may inline and reorder freely. A mutated graph input gets one
// write-back (input <- final version), stored by the last kernels; a graph output naming any value
// of an input's class names the input itself, so the caller gets its own tensor object back, as
// eager's `x.add_(y)` returns x. Since only the write-backs touch the inputs, and they come last,
// a call whose ops fail midway has written nothing: the llvm_cpu backend then replays the graph on
// ATen, which mutates and raises exactly where eager does (so graphs drawing random numbers, which
// a replay would draw twice, are not functionalized).
//
// A write into a chain of slice (step 1) and select views of a class (transformers' BART shifts
// its decoder ids with `shifted[:, 1:] = ids[:, :-1]; shifted[:, 0] = start`) is the functional
// write into the view, then the class's new version rebuilt around it, innermost view first:
// cat(base[.., :start], new_view, base[.., end:]) along the view's dim (a select's new row
// unsqueezed), so the scatter is a view and a cat kernel. The write's result (the view) reads as
// the same views of the new version, until the class is written again.
// What stays ATen's (Unsupported, the whole graph runs on the aten backend, which executes the
// in-place ops as recorded): a write into another view (x.t().add_(1), a strided slice, or one in
// a graph with symbolic sizes), a view of a class taken before a
// later mutation of that class (the view would have to see the new data), an op whose result type
// differs from self's (int_x.add_(0.5) computes in float, then truncates), a returned view of a
// mutated input (it must alias the caller's tensor), and index_put_.
// In-place ops whose Lower column is Extern (index_copy_, a static KV cache's update) keep no
// functional form: they run in place, as an ATen call between the kernels, on a graph input that
// no op before it reads and no other op writes (its old contents unread, the call is the only
// writer: copying a whole cache per step into a functional version and back would cost more than
// the step). Later ops read the call's result, the input's own storage; the input gets no write-back
// (ATen bumps its version). Such a graph no longer writes nothing when a later step fails, but the
// ATen replay then writes the same rows again: the rows come from values that never read the
// input's old contents.
// copy_ and fill_ have no twin row: self.copy_(src) is src expanded to self's shape and cast to its
// dtype; self.fill_(v) is the same with src a 0-dim tensor of v (scalar_tensor for a number).
#include "codegen/loop/passes.h"

#include "codegen/capture/meta_rules.h"
#include "codegen/capture/meta_views.h"
#include "runtime/errors.h"

#include <algorithm>
#include <unordered_map>

namespace fastdyn::codegen::loop {
namespace {

// The out-of-place op computing what `op` writes (ops.def's Twin column), or nullopt.
std::optional<OpId> functional_twin(OpId op) {
  const OpId twin = op_info(op).twin;
  if (twin == OpId::NoTwin) return std::nullopt;
  return twin;
}

// Eager computes an in-place op in the promoted type of its operands and casts into self. The
// twin reproduces that only when promotion gives self's dtype: every tensor operand has it (a
// masked_fill mask excepted) and no float number meets an integral self.
bool same_result_type(const Graph& g, const Node& n) {
  const c10::ScalarType self = g.meta(n.args.at(0).value).dtype;
  const bool mask_arg = n.op == OpId::masked_fill__Scalar || n.op == OpId::masked_fill__Tensor;
  for (size_t i = 1; i < n.args.size(); ++i) {
    const Arg& a = n.args[i];
    if (a.kind == Arg::Kind::Value && !(mask_arg && i == 1) && g.meta(a.value).dtype != self) return false;
    if (a.kind == Arg::Kind::ValueList) return false;
    if (a.kind == Arg::Kind::Double && !is_floating(self)) return false;
  }
  return true;
}

// A slice (step 1) or select node's dim, wrapped into [0, ndim).
int64_t view_dim(const Node& p, const TensorMeta& base) {
  const int64_t d = p.args[1].i;
  return d < 0 ? d + static_cast<int64_t>(base.sizes.size()) : d;
}

// What slice/select p makes of `base` (its meta), p's arguments read as ATen reads them.
TensorMeta view_meta(const Node& p, const TensorMeta& base) {
  if (p.op == OpId::select_int) return meta::select(base, view_dim(p, base), p.args[2].i).meta;
  auto bound = [](const Arg& a) { return a.kind == Arg::Kind::Int ? std::optional<int64_t>(a.i) : std::nullopt; };
  return meta::slice(base, view_dim(p, base), bound(p.args[2]), bound(p.args[3]), 1);
}

TensorMeta fresh_meta(const TensorMeta& like, std::vector<int64_t> strides) {
  TensorMeta m = like;
  m.strides = std::move(strides);
  m.storage_offset = 0;
  return m;
}

class Functionalizer {
 public:
  Functionalizer(const Graph& g, bool random_ok) : g_(g), random_ok_(random_ok) {}

  Functional run() {
    const size_t nv = g_.values.size();
    root_.resize(nv);
    for (size_t v = 0; v < nv; ++v) root_[v] = static_cast<ValueId>(v);
    producer_.assign(nv, -1);
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (ValueId o : g_.nodes[i].outputs) producer_[static_cast<size_t>(o)] = static_cast<int32_t>(i);
    find_mutations();
    check_in_place_externs();
    Functional f;
    if (last_mutation_.empty()) {
      f.graph = g_;
      return f;
    }
    check_views();
    check_view_write_results();
    check_returned_views();
    f.graph.values = g_.values;
    f.graph.binding = g_.binding;
    f.graph.inputs = g_.inputs;
    current_.clear();
    for (size_t i = 0; i < g_.nodes.size(); ++i) rewrite(g_.nodes[i], f.graph);
    std::vector<bool> is_input(nv, false);
    for (ValueId v : g_.inputs) is_input[static_cast<size_t>(v)] = true;
    for (ValueId o : g_.outputs) {
      ValueId r = root_[static_cast<size_t>(o)];
      const bool mutated = last_mutation_.count(r) > 0;
      f.graph.outputs.push_back(!mutated ? o : is_input[static_cast<size_t>(r)] ? r : current_.at(r));
    }
    for (ValueId v : g_.inputs) {
      auto it = current_.find(v);
      if (it == current_.end()) continue;
      if (std::find(extern_written_.begin(), extern_written_.end(), v) != extern_written_.end())
        f.extern_writes.push_back(v);
      else
        f.writebacks.push_back({v, it->second, static_cast<int32_t>(mutations_at_.at(v).size())});
    }
    return f;
  }

 private:
  bool is_view_output(ValueId v) const {
    int32_t p = producer_[static_cast<size_t>(v)];
    return p >= 0 && op_info(g_.nodes[static_cast<size_t>(p)].op).category == OpCategory::View;
  }

  bool has_random_op() const {
    for (const Node& n : g_.nodes)
      if (op_info(n.op).category == OpCategory::Random) return true;
    return false;
  }

  // The class root of the storage v lives in (through views).
  ValueId storage_root(ValueId v) const {
    while (is_view_output(v)) {
      const Node& n = g_.nodes[static_cast<size_t>(producer_[static_cast<size_t>(v)])];
      if (n.args.empty() || n.args[0].kind != Arg::Kind::Value) break;
      v = n.args[0].value;
    }
    return root_[static_cast<size_t>(v)];
  }

  void find_mutations() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (op_info(n.op).category != OpCategory::InPlace) continue;
      FD_CHECK(!n.args.empty() && n.args[0].kind == Arg::Kind::Value, "in-place node without a self tensor");
      ValueId self = n.args[0].value;
      ValueId r = root_[static_cast<size_t>(self)];
      if (is_view_output(r)) {
        if (!scatter_chain(r, i)) throw Unsupported(std::string("in-place aten::") + op_info(n.op).aten + " writes into a view");
        view_writes_[i] = r;
        r = storage_root(r);
      }
      if (!copies(n.op) && !in_place_extern(n.op) && (!functional_twin(n.op) || !same_result_type(g_, n)))
        throw Unsupported(std::string("in-place aten::") + op_info(n.op).aten + " has no out-of-place form here");
      // x.add_(x.t()): ATen refuses the partial overlap. (What an earlier write into a view
      // returned reads as a new value: `x[:, 1:] += y` stores it back.)
      for (size_t a = 1; a < n.args.size(); ++a)
        if (n.args[a].kind == Arg::Kind::Value && n.args[a].value != self && storage_root(n.args[a].value) == r &&
            !written_view_result(n.args[a].value))
          throw Unsupported(std::string("in-place aten::") + op_info(n.op).aten + " reads a view of what it writes");
      const TensorMeta& m = g_.meta(r);
      for (size_t d = 0; d < m.sizes.size(); ++d)
        if (m.sizes[d] > 1 && m.strides[d] == 0)  // eager refuses the write (elements share memory)
          throw Unsupported(std::string("in-place aten::") + op_info(n.op).aten + " into an expanded tensor");
      for (ValueId o : n.outputs) root_[static_cast<size_t>(o)] = r;
      if (!random_ok_ && has_random_op())  // NB: the backend replays a failed call on ATen: a replay must draw the same numbers
        throw Unsupported("a graph that draws random numbers mutates a tensor in place");
      last_mutation_[r] = i;
      mutations_at_[r].push_back(i);
    }
  }

  // A view of a class read after a mutation that came after the view was taken would have to
  // show the new data (x.t() read by the add_ it feeds is fine; v = x[1:], x.mul_(2), v + 1 is not).
  void check_views() const {
    const size_t nn = g_.nodes.size();
    std::vector<size_t> last_read(g_.values.size(), 0);  // latest reader, through derived views
    for (size_t k = 0; k < nn; ++k)
      for (const Arg& a : g_.nodes[k].args) {
        if (a.kind == Arg::Kind::Value) last_read[static_cast<size_t>(a.value)] = k;
        if (a.kind == Arg::Kind::ValueList)
          for (ValueId v : a.values)
            if (v >= 0) last_read[static_cast<size_t>(v)] = k;
      }
    for (ValueId o : g_.outputs) last_read[static_cast<size_t>(o)] = nn;
    for (size_t j = nn; j-- > 0;) {
      const Node& n = g_.nodes[j];
      if (op_info(n.op).category != OpCategory::View || n.args.empty() || n.args[0].kind != Arg::Kind::Value) continue;
      const ValueId base = n.args[0].value;
      size_t latest = 0;
      for (ValueId o : n.outputs) latest = std::max(latest, last_read[static_cast<size_t>(o)]);
      last_read[static_cast<size_t>(base)] = std::max(last_read[static_cast<size_t>(base)], latest);
      auto it = mutations_at_.find(root_[static_cast<size_t>(base)]);
      if (it == mutations_at_.end()) continue;
      for (size_t m : it->second)
        if (j < m && m < latest)
          throw Unsupported("a view of a tensor is read after the tensor is mutated in place: " + print_node(g_, n));
    }
  }

  // A returned view of a mutated input must alias the caller's tensor, while the graph computes
  // from the functional version: leave such graphs to ATen.
  void check_returned_views() const {
    std::vector<bool> is_input(g_.values.size(), false);
    for (ValueId v : g_.inputs) is_input[static_cast<size_t>(v)] = true;
    for (ValueId o : g_.outputs) {
      if (!is_view_output(o)) continue;
      const ValueId r = storage_root(o);
      if (is_input[static_cast<size_t>(r)] && last_mutation_.count(r))
        throw Unsupported("a view of an input mutated in place is returned");
    }
  }

  static bool in_place_extern(OpId op) { return op_info(op).lowering == Lowering::Extern; }

  // An in-place extern writes a graph input (not a view) that no node before it reads (through
  // views too) and no other node writes.
  void check_in_place_externs() const {
    std::vector<bool> is_input(g_.values.size(), false);
    for (ValueId v : g_.inputs) is_input[static_cast<size_t>(v)] = true;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (op_info(n.op).category != OpCategory::InPlace || !in_place_extern(n.op)) continue;
      const ValueId self = n.args[0].value;
      const ValueId r = root_[static_cast<size_t>(self)];
      auto refuse = [&](const std::string& why) {
        throw Unsupported(std::string("in-place aten::") + op_info(n.op).aten + " runs in place only on a graph input " +
                          "that no op before it reads and no other op writes: " + why);
      };
      if (self != r || !is_input[static_cast<size_t>(r)]) refuse("it writes an intermediate value or a view");
      if (mutations_at_.at(r).size() != 1) refuse("the input is written by other ops too");
      if (n.outputs.empty() || g_.meta(n.outputs[0]).requires_grad) refuse("it needs a gradient");
      auto in_class = [&](ValueId v) { return v >= 0 && storage_root(v) == r; };
      for (size_t k = 0; k <= i; ++k)
        for (size_t a = 0; a < g_.nodes[k].args.size(); ++a) {
          const Arg& arg = g_.nodes[k].args[a];
          const bool reads_r = (arg.kind == Arg::Kind::Value && in_class(arg.value)) ||
                               (arg.kind == Arg::Kind::ValueList && std::any_of(arg.values.begin(), arg.values.end(), in_class));
          if (reads_r && !(k == i && a == 0)) refuse("its old contents are read by " + print_node(g_, g_.nodes[k]));
        }
    }
  }

  static bool copies(OpId op) { return op == OpId::copy_ || op == OpId::fill__Scalar || op == OpId::fill__Tensor; }

  ValueId read(ValueId v) const {
    if (auto r = view_results_.find(v); r != view_results_.end()) return r->second;
    auto it = current_.find(root_[static_cast<size_t>(v)]);
    return it == current_.end() ? v : it->second;
  }

  void rewrite(const Node& n, Graph& out) {
    Node f = n;
    for (Arg& a : f.args) {
      if (a.kind == Arg::Kind::Value) a.value = read(a.value);
      if (a.kind == Arg::Kind::ValueList)
        for (ValueId& v : a.values)
          if (v >= 0) v = read(v);
    }
    if (op_info(n.op).category != OpCategory::InPlace) {
      out.nodes.push_back(std::move(f));
      return;
    }
    if (in_place_extern(n.op)) {  // later reads read its result (the input's storage): they run after it
      current_[root_[static_cast<size_t>(n.args[0].value)]] = n.outputs.at(0);
      extern_written_.push_back(root_[static_cast<size_t>(n.args[0].value)]);
      out.nodes.push_back(std::move(f));
      return;
    }
    if (auto vw = view_writes_.find(static_cast<size_t>(&n - g_.nodes.data())); vw != view_writes_.end()) {
      write_into_view(n, std::move(f), vw->second, out);
      return;
    }
    functional_write(n, std::move(f), out);
    current_[root_[static_cast<size_t>(n.args[0].value)]] = n.outputs.at(0);
  }

  // The in-place op n (its args read, f) as an out-of-place one whose result is n's output.
  void functional_write(const Node& n, Node f, Graph& out) {
    const ValueId result = n.outputs.at(0);
    const TensorMeta& self = g_.meta(n.args[0].value);
    if (n.op == OpId::fill__Scalar) {
      // The number as a 0-dim tensor of self's dtype (cast as ATen's fill_ casts it), then a copy.
      TensorMeta sm;
      sm.dtype = self.dtype;
      sm.device = self.device;
      const ValueId s = out.add_value(sm);
      Node st;
      st.op = OpId::scalar_tensor;
      st.args = {f.args.at(1), Arg::of_dtype(self.dtype), Arg::none(), Arg::of_device(self.device), Arg::none()};
      st.outputs = {s};
      out.nodes.push_back(std::move(st));
      f.args.at(1) = Arg::of_value(s);
      copy_twin(f, self, result, out);
    } else if (copies(n.op)) {
      copy_twin(f, self, result, out);
    } else {
      f.op = *functional_twin(n.op);
      std::vector<const TensorMeta*> operands;
      for (const Arg& a : f.args)
        if (a.kind == Arg::Kind::Value) operands.push_back(&out.meta(a.value));
      out.values[static_cast<size_t>(result)] = fresh_meta(self, tensor_iterator_strides(self.sizes, operands));
      out.nodes.push_back(std::move(f));
    }
  }

  // The views from the class root down to `view` (slice with step 1 or select, static sizes),
  // whose only reader from the in-place node `at` on is that node (nothing reads the write's
  // result, nor the view afterwards). False: a write this pass leaves to ATen.
  bool scatter_chain(ValueId view, size_t at) {
    std::vector<ValueId> chain;
    for (ValueId v = view; is_view_output(v); v = g_.nodes[static_cast<size_t>(producer_[static_cast<size_t>(v)])].args[0].value) {
      const Node& p = g_.nodes[static_cast<size_t>(producer_[static_cast<size_t>(v)])];
      if (p.op != OpId::slice_Tensor && p.op != OpId::select_int) return false;
      if (p.args.empty() || p.args[0].kind != Arg::Kind::Value || g_.meta(v).symbolic()) return false;
      if (p.op == OpId::slice_Tensor && (p.args.size() < 5 || p.args[4].kind != Arg::Kind::Int || p.args[4].i != 1)) return false;
      chain.push_back(v);
    }
    const ValueId base = g_.nodes[static_cast<size_t>(producer_[static_cast<size_t>(chain.back())])].args[0].value;
    // (The rebuilt class is contiguous, as a returned root must keep its strides.)
    if (g_.meta(base).symbolic() || root_[static_cast<size_t>(base)] != base || !is_contiguous(g_.meta(base))) return false;
    const Node& n = g_.nodes[at];
    auto in_chain = [&](ValueId v) { return std::find(chain.begin(), chain.end(), v) != chain.end(); };
    for (ValueId o : g_.outputs)
      if (in_chain(o) || std::find(n.outputs.begin(), n.outputs.end(), o) != n.outputs.end()) return false;
    return last_reader(in_chain) <= at;
  }

  bool written_view_result(ValueId v) const {
    const int32_t p = producer_[static_cast<size_t>(v)];
    return p >= 0 && view_writes_.count(static_cast<size_t>(p));
  }

  // The last node reading a value `named` picks (0: none).
  template <typename Pred>
  size_t last_reader(Pred named) const {
    size_t last = 0;
    for (size_t k = 0; k < g_.nodes.size(); ++k)
      for (const Arg& a : g_.nodes[k].args)
        if ((a.kind == Arg::Kind::Value && named(a.value)) ||
            (a.kind == Arg::Kind::ValueList && std::any_of(a.values.begin(), a.values.end(), named)))
          last = k;
    return last;
  }

  // What a write into a view returns is that view of the class's new version (`x[:, 1:] += y`
  // reads it back to store it): read until the class changes again.
  void check_view_write_results() const {
    for (const auto& [at, view] : view_writes_) {
      const Node& n = g_.nodes[at];
      const size_t last = last_reader([&](ValueId v) { return std::find(n.outputs.begin(), n.outputs.end(), v) != n.outputs.end(); });
      for (size_t m : mutations_at_.at(storage_root(view)))
        if (at < m && m < last)
          throw Unsupported("the result of a write into a view is read after the tensor is mutated again: " + print_node(g_, n));
    }
  }

  // n writes into `view` (a slice/select chain, scatter_chain): the new view, then each enclosing
  // tensor rebuilt around it up to the class root, whose new version that is.
  void write_into_view(const Node& n, Node f, ValueId view, Graph& out) {
    Node w = std::move(f);
    w.outputs = {out.add_value(g_.meta(n.outputs.at(0)))};
    functional_write(w, w, out);  // (n's output stays unread: scatter_chain)
    ValueId inner = w.outputs[0];
    std::vector<const Node*> chain;  // innermost view first
    for (ValueId v = view; is_view_output(v);) {
      const Node& p = g_.nodes[static_cast<size_t>(producer_[static_cast<size_t>(v)])];
      chain.push_back(&p);
      const ValueId base = read(p.args[0].value);
      inner = rebuild_around(p, base, inner, out);
      v = p.args[0].value;
    }
    current_[storage_root(view)] = inner;
    // n's result: the same views of the new version (read only before the next write: checked).
    ValueId result = inner;
    for (auto p = chain.rbegin(); p != chain.rend(); ++p) {
      std::vector<Arg> args = (*p)->args;
      args[0] = Arg::of_value(result);
      result = out.add_node((*p)->op, std::move(args), view_meta(**p, out.meta(result)));
    }
    for (ValueId o : n.outputs) view_results_[o] = result;
  }

  // base with the slice or select `p` of it replaced by `part`: cat of what lies before, part,
  // and what lies after, along p's dim.
  ValueId rebuild_around(const Node& p, ValueId base, ValueId part, Graph& out) {
    const TensorMeta bm = out.meta(base);
    const int64_t dim = view_dim(p, bm);
    const int64_t size = bm.sizes[static_cast<size_t>(dim)];
    int64_t start = 0, end = 0;
    if (p.op == OpId::select_int) {
      start = p.args[2].i < 0 ? p.args[2].i + size : p.args[2].i;
      end = start + 1;
      part = out.add_node(OpId::unsqueeze, {Arg::of_value(part), Arg::of_int(dim)}, meta::unsqueeze(out.meta(part), dim));
    } else {  // ATen's slice bounds: a negative one counts from the end, then both clamp to the dim
      auto bound = [&](const Arg& a, int64_t absent, int64_t lo) {
        int64_t b = a.kind == Arg::Kind::Int ? a.i : absent;
        if (b < 0) b += size;
        return std::min(std::max(b, lo), size);
      };
      start = bound(p.args[2], 0, 0);
      end = bound(p.args[3], size, start);
    }
    std::vector<ValueId> pieces;
    auto piece = [&](int64_t from, int64_t to) {
      if (from < to)
        pieces.push_back(out.add_node(OpId::slice_Tensor, {Arg::of_value(base), Arg::of_int(dim), Arg::of_int(from), Arg::of_int(to), Arg::of_int(1)},
                                meta::slice(bm, dim, from, to, 1)));
    };
    piece(0, start);
    pieces.push_back(part);
    piece(end, size);
    return out.add_node(OpId::cat, {Arg::of_values(pieces), Arg::of_int(dim)}, fresh_meta(bm, contiguous_strides(bm.sizes)));
  }

  // self.copy_(src): src broadcast to self's shape (an expand view) and cast to self's dtype.
  void copy_twin(const Node& f, const TensorMeta& self, ValueId result, Graph& out) {
    ValueId src = f.args.at(1).value;
    const TensorMeta& sm = out.meta(src);
    if (sm.sizes != self.sizes) {
      TensorMeta em = sm;
      em.sizes = self.sizes;
      em.strides.assign(self.sizes.size(), 0);
      const size_t lead = self.sizes.size() - sm.sizes.size();
      for (size_t d = 0; d < sm.sizes.size(); ++d)
        em.strides[lead + d] = sm.sizes[d] == self.sizes[lead + d] ? sm.strides[d] : 0;
      ValueId e = out.add_value(em);
      Node ex;
      ex.op = OpId::expand;
      ex.args = {Arg::of_value(src), Arg::of_ints(self.sizes), Arg::of_bool(false)};
      ex.outputs = {e};
      out.nodes.push_back(std::move(ex));
      src = e;
    }
    Node cp;
    cp.op = OpId::_to_copy;
    cp.args = {Arg::of_value(src), Arg::of_dtype(self.dtype), Arg::none(), Arg::none(), Arg::none(),
               Arg::of_bool(false), Arg::none()};
    cp.outputs = {result};
    // The layout is self's: copy_ writes into self, whose strides a caller sees when it is returned.
    out.values[static_cast<size_t>(result)] = fresh_meta(self, preserve_format_strides(self));
    out.nodes.push_back(std::move(cp));
  }

  const Graph& g_;
  bool random_ok_;
  std::vector<ValueId> root_;
  std::vector<int32_t> producer_;
  std::unordered_map<ValueId, size_t> last_mutation_;  // class root -> index of its last in-place node
  std::unordered_map<ValueId, std::vector<size_t>> mutations_at_;  // class root -> its in-place nodes
  std::unordered_map<ValueId, ValueId> current_;       // class root -> latest functional version
  std::vector<ValueId> extern_written_;                // inputs an in-place extern writes in place
  std::unordered_map<size_t, ValueId> view_writes_;    // in-place node -> the view it writes into
  std::unordered_map<ValueId, ValueId> view_results_;  // such a node's result -> that view of the new version
};

}  // namespace

Functional functionalize(const Graph& g, bool random_ok) { return Functionalizer(g, random_ok).run(); }

}  // namespace fastdyn::codegen::loop
