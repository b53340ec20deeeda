// codegen/loop/fusion.cpp — fuse: the scheduler that turns a LoweredGraph into kernels.
//
// 1. Materialisation. A pointwise value is computed inline wherever it is read (its body is
//    substituted into the reader's stage through the reader's index map) unless it must exist in
//    memory (a graph output, an extern's operand, the base of a reshape) or inlining would repeat
//    real work or memory traffic: a value read more than once is inlined only when it is a few
//    cheap instrs loading at most one buffer (through its own inlined inputs), since only then
//    does recomputing it cost less than writing and re-reading it (bytes saved). An expensive value
//    (a transcendental or a gather anywhere in its inlined body) is not inlined into a reader that
//    broadcasts it either: rotary embeddings' cos/sin over [seq, dim] read by every head would be
//    recomputed once per head. Reductions are never duplicated: they live in exactly one kernel.
// 2. Kernels, in node order: one per materialised pointwise value, the lowering's kernels for
//    reductions / softmax / norms / cat.
// 3. Merging, between adjacent kernel steps: a kernel joins the previous one as later stages when
//    it iterates the same full shape (reduction -> broadcast -> reduction chains, horizontal
//    reductions, pointwise consumers), or as a per-outer epilogue when it iterates the shape of a
//    value the previous kernel stores once per outer point. A read of a value the previous kernel
//    produced is allowed only at the very point it was produced (it then becomes a register for
//    per-outer values), so outer points stay independent and the threads need no barrier.
// 4. Write-backs (functionalize.cpp), after every other step and never merged with one: per
//    mutated graph input a kernel storing the input's final value into the caller's tensor.
// 5. Stores that nothing reads any more (the value lives only in registers now) are dropped, and
//    so are pure extern steps whose results nothing reads.
#include "codegen/loop/interpret.h"
#include "codegen/loop/passes.h"

#include "runtime/errors.h"

#include <algorithm>
#include <cstdlib>
#include <map>

namespace fastdyn::codegen::loop {
namespace {

using ST = c10::ScalarType;

AffineIndex zero_index(size_t dims) {
  AffineIndex ix;
  ix.coef.assign(dims, 0);
  return ix;
}

std::vector<AffineIndex> identity_map(size_t dims) {
  std::vector<AffineIndex> m;
  for (size_t d = 0; d < dims; ++d) {
    AffineIndex ix = zero_index(dims);
    ix.coef[d] = 1;
    m.push_back(ix);
  }
  return m;
}

bool is_transcendental(Op op) {
  switch (op) {
    case Op::Exp: case Op::Expm1: case Op::Log: case Op::Log1p: case Op::Log2: case Op::Log10: case Op::Sin:
    case Op::Cos: case Op::Tan: case Op::Tanh: case Op::Sinh: case Op::Cosh: case Op::Asin: case Op::Acos:
    case Op::Atan: case Op::Erf: case Op::Erfc: case Op::Pow: case Op::Atan2: case Op::Div: case Op::Sqrt:
    case Op::Rsqrt: case Op::Recip: case Op::Rem: case Op::Fmod: return true;
    default: return false;
  }
}

// Whether two accesses reach the same point of the kernel's domain: equal but for coefficients
// of dims of extent 1 (the index there is 0 whatever the coefficient: lowering writes loads of a
// size-1 dim as 0, stores through the kernel's own dim).
bool same_point(const Access& x, const Access& y, const Kernel& k) {
  if (x.value != y.value || x.index.size() != y.index.size()) return false;
  for (size_t r = 0; r < x.index.size(); ++r) {
    const AffineIndex& a = x.index[r];
    const AffineIndex& b = y.index[r];
    if (a.constant != b.constant || a.dynamic != b.dynamic || a.coef.size() != b.coef.size()) return false;
    for (size_t d = 0; d < a.coef.size(); ++d) {
      const int64_t extent = d < k.outer.size() ? k.outer[d] : k.inner[d - k.outer.size()];
      if (a.coef[d] != b.coef[d] && extent != 1) return false;
    }
  }
  return true;
}

class Fuser {
 public:
  explicit Fuser(const LoweredGraph& lg) : lg_(lg), g_(lg.graph) {}

  Program run() {
    const size_t nv = g_.values.size();
    producer_.assign(nv, -1);
    out_index_.assign(nv, 0);
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (size_t o = 0; o < g_.nodes[i].outputs.size(); ++o) {
        producer_[static_cast<size_t>(g_.nodes[i].outputs[o])] = static_cast<int32_t>(i);
        out_index_[static_cast<size_t>(g_.nodes[i].outputs[o])] = static_cast<int32_t>(o);
      }
    for (const TensorMeta& m : g_.values) gpu_graph_ = gpu_graph_ || m.device.is_cuda();
    decide_materialisation();
    p_.graph = g_;
    p_.plans.assign(nv, ValuePlan());
    for (ValueId v : g_.inputs) p_.plans[static_cast<size_t>(v)].kind = ValuePlan::Kind::Input;
    for (size_t i = 0; i < g_.nodes.size(); ++i) schedule_node(i);
    schedule_writebacks();
    p_.writebacks = lg_.writebacks;
    p_.extern_writes = lg_.extern_writes;
    drop_dead_stores();
    return std::move(p_);
  }

 private:
  const NodeLowering* lowering_of(ValueId v) const {
    int32_t n = producer_[static_cast<size_t>(v)];
    return n < 0 ? nullptr : &lg_.nodes[static_cast<size_t>(n)];
  }
  bool is_kind(ValueId v, NodeLowering::Kind k) const {
    const NodeLowering* l = lowering_of(v);
    return l && l->kind == k;
  }
  const NodeLowering::View& view_of(ValueId v) const {
    return lowering_of(v)->views.at(static_cast<size_t>(out_index_[static_cast<size_t>(v)]));
  }


  // ---- 1. materialisation -------------------------------------------------------------------

  void decide_materialisation() {
    const size_t nv = g_.values.size();
    must_.assign(nv, false);
    uses_.assign(nv, 0);
    inline_.assign(nv, false);
    reads_.assign(nv, 0);
    expensive_.assign(nv, false);
    reader_numel_.assign(nv, 0);
    for (ValueId v : g_.outputs) must_[static_cast<size_t>(v)] = true;
    for (const Node& n : g_.nodes) {
      const NodeLowering& l = lg_.nodes[static_cast<size_t>(&n - g_.nodes.data())];
      for_each_value_input(n, [&](ValueId v) {
        if (l.kind == NodeLowering::Kind::Extern) must_[static_cast<size_t>(v)] = true;
        if (l.kind == NodeLowering::Kind::View && !l.views.at(0).affine) must_[static_cast<size_t>(v)] = true;
      });
    }
    // Readers through affine views count as readers of the base; a view that must exist in
    // memory needs its base in memory. Views follow their bases, so walk the nodes backwards.
    for (size_t i = g_.nodes.size(); i-- > 0;) {
      const Node& n = g_.nodes[i];
      const NodeLowering& l = lg_.nodes[i];
      if (l.kind == NodeLowering::Kind::View) {
        int64_t through = 0;
        for (ValueId o : n.outputs) {
          through += uses_[static_cast<size_t>(o)];
          if (must_[static_cast<size_t>(o)]) must_[static_cast<size_t>(l.views[0].base)] = true;
        }
        uses_[static_cast<size_t>(l.views[0].base)] += l.views[0].affine ? through : 1;
        for (ValueId o : n.outputs)
          reader_numel_[static_cast<size_t>(l.views[0].base)] =
              std::max(reader_numel_[static_cast<size_t>(l.views[0].base)], reader_numel_[static_cast<size_t>(o)]);
      } else {
        // A pointwise reader computes one element per element of its output; other readers
        // (reductions, cat, externs) read each element of their inputs once.
        const int64_t n_numel = l.kind == NodeLowering::Kind::Pointwise ? g_.meta(n.outputs[0]).numel() : 0;
        for_each_value_input(n, [&](ValueId v) {
          uses_[static_cast<size_t>(v)] += 1;
          reader_numel_[static_cast<size_t>(v)] = std::max(reader_numel_[static_cast<size_t>(v)], n_numel);
        });
      }
    }
    for (const WriteBack& w : lg_.writebacks) uses_[static_cast<size_t>(w.value)] += 1;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const NodeLowering& l = lg_.nodes[i];
      if (l.kind != NodeLowering::Kind::Pointwise) continue;
      ValueId v = g_.nodes[i].outputs[0];
      if (must_[static_cast<size_t>(v)]) continue;
      int work = 0;
      bool expensive = false;
      for (const Instr& in : l.body.instrs) {
        if (in.op == Op::Load || in.op == Op::Const || in.op == Op::Count || in.op == Op::Cast) continue;
        ++work;
        expensive |= is_transcendental(in.op);
      }
      int reads = 0;  // buffers a reader of v would load if v were inlined (through inlined inputs)
      for (const Access& a : l.body.loads) {
        for (const AffineIndex& ix : a.index) expensive |= ix.dynamic >= 0;  // gathers
        const bool inlined = inline_[static_cast<size_t>(a.value)];
        reads += inlined ? std::max(1, reads_[static_cast<size_t>(a.value)]) : 1;
        expensive |= inlined && expensive_[static_cast<size_t>(a.value)];
      }
      reads_[static_cast<size_t>(v)] = reads;
      expensive_[static_cast<size_t>(v)] = expensive;
      const bool broadcast = reader_numel_[static_cast<size_t>(v)] > g_.meta(v).numel();
      // Bytes: inlined into its n readers, v costs n * reads loads; in memory, 1 store + n loads.
      // So a value read more than once is inlined only when it reads at most one buffer (and is
      // cheap to recompute). Without the second condition a residual stream (h = h + f(h), read
      // by a layer norm and by the next residual add) is recomputed from every earlier layer's
      // outputs in each later kernel: traffic and kernel size grow with depth.
      inline_[static_cast<size_t>(v)] =
          (uses_[static_cast<size_t>(v)] <= 1 && !(expensive && broadcast)) || (!expensive && work <= 4 && reads <= 1);
      // A CPU scalar in a GPU graph (an optimizer's bias correction: loop/interpret.h) is always
      // recomputed where it is read: in a GPU kernel that is a few instructions per thread from
      // values passed by value, where a buffer of its own costs a host kernel and an allocation
      // at every call (an Adam step over 96 parameters: hundreds of them).
      if (host_value(v)) inline_[static_cast<size_t>(v)] = true;
      // So is a GPU scalar made from scalars only (fused=True keeps an optimizer's step counts on
      // the GPU): per thread a few instructions on values every thread loads from the same
      // address, where a kernel of its own costs a launch and a buffer per parameter, and orders
      // the parameters' updates after their own bias corrections, so that they cannot launch as
      // one group (codegen/cuda/horizontal.h).
      if (gpu_graph_ && g_.meta(v).numel() == 1 &&
          std::all_of(l.body.loads.begin(), l.body.loads.end(), [&](const Access& a) { return g_.meta(a.value).numel() == 1; }))
        inline_[static_cast<size_t>(v)] = true;
      // A write-back's value (its only reader the write-back) that reads a value a kernel stores
      // at its own shape is computed by an ordinary kernel, which joins that one and stores into
      // the input directly (schedule_writebacks): an optimizer's parameter update, computed from
      // the moments its kernel has just stored, in the same pass over the parameter instead of a
      // write-back kernel at the end reading them all again.
      if (inline_[static_cast<size_t>(v)] && uses_[static_cast<size_t>(v)] == 1 && written_back(v) &&
          reads_stored(l, g_.meta(v).sizes, 0))
        inline_[static_cast<size_t>(v)] = false;
    }
  }

  // A CPU scalar in a GPU graph (loop/interpret.h): computed on the host, read by GPU kernels by value.
  bool host_value(ValueId v) const { return gpu_graph_ && host_scalar(g_.meta(v)); }

  bool written_back(ValueId v) const {
    for (const WriteBack& w : lg_.writebacks)
      if (w.value == v) return true;
    return false;
  }

  // Whether a pointwise body reads, itself or through the inlined values it reads, a value of
  // `sizes` that a pointwise kernel stores.
  bool reads_stored(const NodeLowering& l, const std::vector<int64_t>& sizes, int depth) const {
    if (depth > 8) return false;
    for (const Access& a : l.body.loads) {
      const int32_t prod = producer_[static_cast<size_t>(a.value)];
      if (prod < 0) continue;
      const NodeLowering& pl = lg_.nodes[static_cast<size_t>(prod)];
      if (pl.kind != NodeLowering::Kind::Pointwise) continue;
      if (!inline_[static_cast<size_t>(a.value)] ? g_.meta(a.value).sizes == sizes : reads_stored(pl, sizes, depth + 1)) return true;
    }
    return false;
  }

  // ---- building stages through inlined producers ---------------------------------------------

  // Rows of `m` (value dims over X dims, dynamic ids in the source stage, remapped by `remap`)
  // composed with `d` (X dims over kernel dims, dynamic ids already in the destination stage).
  std::vector<AffineIndex> compose(const std::vector<AffineIndex>& m, const std::vector<AffineIndex>& d,
                                   const std::vector<int32_t>* remap, size_t kdims) const {
    std::vector<AffineIndex> out;
    for (const AffineIndex& row : m) {
      AffineIndex r = zero_index(kdims);
      r.constant = row.constant;
      shapes::SizeExpr sym = row.constant_expr();
      bool symbolic = !row.sym_constant.empty();
      if (row.dynamic >= 0) r.dynamic = remap ? (*remap)[static_cast<size_t>(row.dynamic)] : row.dynamic;
      for (size_t x = 0; x < row.coef.size(); ++x) {
        int64_t c = row.coef[x];
        if (c == 0) continue;
        const AffineIndex& dx = d.at(x);
        for (size_t k = 0; k < kdims; ++k) r.coef[k] += c * dx.coef[k];
        r.constant += c * dx.constant;
        sym = sym + shapes::SizeExpr(c) * dx.constant_expr();
        symbolic |= !dx.sym_constant.empty();
        if (dx.dynamic >= 0) {
          if (c != 1 || r.dynamic >= 0) throw Unsupported("a gathered index is scaled or combined");
          r.dynamic = dx.dynamic;
        }
      }
      if (symbolic && !sym.is_constant()) r.sym_constant = {sym};
      out.push_back(std::move(r));
    }
    return out;
  }

  struct StageCtx {
    Stage* dst;
    const Kernel* kernel;
    size_t kdims;
    std::vector<int32_t>* nodes;  // the kernel's Kernel::nodes
    std::vector<std::pair<Access, int32_t>> memo;  // resolved reads of this stage
    int32_t reduction_base = 0;                     // renumbering of Reduced when merging
    int32_t stage_base = 0;                         // renumbering of StageValue when merging
    const std::vector<std::vector<int32_t>>* stage_maps = nullptr;  // instr maps of merged stages
  };

  int32_t push(StageCtx& sc, Instr in) {
    sc.dst->instrs.push_back(in);
    return static_cast<int32_t>(sc.dst->instrs.size() - 1);
  }

  // The instr computing value a.value at a.index (over the kernel's dims), in sc's stage.
  int32_t resolve(StageCtx& sc, const Access& a, ST type) {
    for (const auto& [acc, id] : sc.memo)
      if (same_point(acc, a, *sc.kernel)) return id;
    int32_t id;
    ValueId v = a.value;
    if (inline_[static_cast<size_t>(v)]) {
      add_node(*sc.nodes, producer_[static_cast<size_t>(v)]);
      const NodeLowering& l = *lowering_of(v);
      std::vector<int32_t> map = rebuild_instrs(sc, l.body, a.index);
      id = map[static_cast<size_t>(l.result)];
    } else if (is_kind(v, NodeLowering::Kind::View) && view_of(v).affine &&
               p_.plans[static_cast<size_t>(v)].kind == ValuePlan::Kind::None) {
      const NodeLowering::View& vw = view_of(v);
      Access b;
      b.value = vw.base;
      b.index = compose(vw.map, a.index, nullptr, sc.kdims);
      id = resolve(sc, b, type);
    } else {
      sc.dst->loads.push_back(a);
      Instr in;
      in.op = Op::Load;
      in.type = type;
      in.a = static_cast<int32_t>(sc.dst->loads.size() - 1);
      id = push(sc, in);
    }
    sc.memo.emplace_back(a, id);
    return id;
  }

  // Copies src's instrs into sc's stage; src's domain dims are `dmap` over the kernel's dims.
  std::vector<int32_t> rebuild_instrs(StageCtx& sc, const Stage& src, const std::vector<AffineIndex>& dmap) {
    std::vector<int32_t> map(src.instrs.size(), -1);
    for (size_t i = 0; i < src.instrs.size(); ++i) {
      Instr in = src.instrs[i];
      switch (in.op) {
        case Op::Load: {
          Access a;
          a.value = src.loads.at(static_cast<size_t>(in.a)).value;
          a.index = compose(src.loads[static_cast<size_t>(in.a)].index, dmap, &map, sc.kdims);
          map[i] = resolve(sc, a, in.type);
          continue;
        }
        case Op::Reduced: in.a += sc.reduction_base; break;
        case Op::StageValue:
          in.b = (*sc.stage_maps)[static_cast<size_t>(in.a)][static_cast<size_t>(in.b)];
          in.a += sc.stage_base;
          break;
        default:
          if (in.a >= 0 && in.op != Op::Const && in.op != Op::Count) in.a = map[static_cast<size_t>(in.a)];
          if (in.b >= 0) in.b = map[static_cast<size_t>(in.b)];
          if (in.c >= 0) in.c = map[static_cast<size_t>(in.c)];
      }
      map[i] = push(sc, in);
    }
    return map;
  }

  // Appends src (a stage over dims `dmap`) to kernel k as a new stage, or into k's last stage.
  std::vector<int32_t> append_stage(Kernel& k, const Stage& src, const std::vector<AffineIndex>& dmap,
                                    bool per_outer, int32_t reduction_base, int32_t stage_base,
                                    const std::vector<std::vector<int32_t>>* stage_maps, bool into_last) {
    if (!into_last) {
      k.stages.emplace_back();
      k.stages.back().per_outer = per_outer;
    }
    StageCtx sc{&k.stages.back(), &k, static_cast<size_t>(k.dims()), &k.nodes, {}, reduction_base, stage_base, stage_maps};
    if (into_last) {
      // Reads of values this stage already stores at the same point become the stored register.
      for (const Store& s : sc.dst->stores) sc.memo.emplace_back(s.dst, s.instr);
    }
    std::vector<int32_t> map = rebuild_instrs(sc, src, dmap);
    for (const Store& s : src.stores) {
      Store d;
      d.instr = map[static_cast<size_t>(s.instr)];
      d.dst.value = s.dst.value;
      d.dst.index = compose(s.dst.index, dmap, &map, sc.kdims);
      sc.dst->stores.push_back(std::move(d));
    }
    for (const Reduction& r : src.reductions) {
      Reduction d = r;
      d.instr = map[static_cast<size_t>(r.instr)];
      sc.dst->reductions.push_back(d);
    }
    return map;
  }

  // ---- 2. kernels ------------------------------------------------------------------------------

  struct Built {
    Kernel kernel;
    std::vector<int64_t> full;
    std::vector<int32_t> full_to_dom;
    bool pure_pointwise = false;  // one inner stage, no reductions
  };

  // `dmap`: where the stages' dims land in the kernel's domain (none: they are its dims).
  Built build(const KernelDef& def, const std::vector<AffineIndex>* dmap = nullptr) {
    Built b;
    b.kernel.outer = def.kernel.outer;
    b.kernel.inner = def.kernel.inner;
    b.full = def.full;
    b.full_to_dom = def.full_to_dom;
    std::vector<std::vector<int32_t>> maps;
    const auto id = identity_map(static_cast<size_t>(def.kernel.dims()));
    for (const Stage& s : def.kernel.stages)
      maps.push_back(append_stage(b.kernel, s, dmap ? *dmap : id, s.per_outer, 0, 0, &maps, false));
    b.pure_pointwise = def.kernel.stages.size() == 1 && def.kernel.stages[0].reductions.empty() &&
                       !has_scan(def.kernel.stages[0]) &&
                       !def.kernel.stages[0].per_outer;
    return b;
  }

  Built build_pointwise(ValueId v, const NodeLowering& l) { return build_store(l.body, l.result, v); }

  // A kernel over dst's shape evaluating stage `s` (over dst's dims) and storing its instr
  // `result` into `dst` at every point. Its domain walks dst's memory order (the largest stride
  // outermost; outer = all dims but the last), so that a transposed or channels-last result is
  // stored along its contiguous dim by every backend.
  Built build_store(Stage s, int32_t result, ValueId dst) {
    const TensorMeta& m = g_.meta(dst);
    const size_t n = m.sizes.size();
    std::vector<int32_t> order(n);
    for (size_t d = 0; d < n; ++d) order[d] = static_cast<int32_t>(d);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
      return std::abs(m.strides[static_cast<size_t>(x)]) > std::abs(m.strides[static_cast<size_t>(y)]);
    });
    KernelDef def;
    def.full = m.sizes;
    def.full_to_dom.assign(n, 0);
    std::vector<AffineIndex> dmap(n, zero_index(n));
    for (size_t pos = 0; pos < n; ++pos) {
      const size_t d = static_cast<size_t>(order[pos]);
      def.full_to_dom[d] = static_cast<int32_t>(pos);
      dmap[d].coef[pos] = 1;
      def.kernel.outer.push_back(m.sizes[d]);
    }
    if (n > 0) {
      def.kernel.outer.pop_back();
      def.kernel.inner.push_back(m.sizes[static_cast<size_t>(order.back())]);
    }
    Store st;
    st.instr = result;
    st.dst.value = dst;
    st.dst.index = identity_map(n);
    s.stores.push_back(st);
    def.kernel.stages.push_back(std::move(s));
    return build(def, &dmap);
  }

  void schedule_node(size_t i) {
    const Node& n = g_.nodes[i];
    const NodeLowering& l = lg_.nodes[i];
    switch (l.kind) {
      case NodeLowering::Kind::Extern:
        for (ValueId v : n.outputs) p_.plans[static_cast<size_t>(v)].kind = ValuePlan::Kind::Extern;
        p_.steps.push_back({Step::Kind::Extern, static_cast<int32_t>(i)});
        last_ = nullptr;
        return;
      case NodeLowering::Kind::View:
        for (size_t o = 0; o < n.outputs.size(); ++o) {
          const NodeLowering::View& vw = l.views[o];
          const ValuePlan& base = p_.plans[static_cast<size_t>(vw.base)];
          if (base.kind == ValuePlan::Kind::None) continue;  // read through the map, inline
          ValuePlan& pl = p_.plans[static_cast<size_t>(n.outputs[o])];
          pl.kind = ValuePlan::Kind::Alias;
          pl.root = base.kind == ValuePlan::Kind::Alias ? base.root : vw.base;
        }
        return;
      case NodeLowering::Kind::Pointwise: {
        ValueId v = n.outputs[0];
        if (inline_[static_cast<size_t>(v)]) return;
        p_.plans[static_cast<size_t>(v)].kind = ValuePlan::Kind::Buffer;
        add_kernel(build_pointwise(v, l), static_cast<int32_t>(i));
        return;
      }
      case NodeLowering::Kind::Kernels:
        for (ValueId v : n.outputs) p_.plans[static_cast<size_t>(v)].kind = ValuePlan::Kind::Buffer;
        for (const KernelDef& d : l.kernels) add_kernel(build(d), static_cast<int32_t>(i));
        return;
    }
  }

  static void add_node(std::vector<int32_t>& nodes, int32_t node) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }

  void add_kernel(Built b, int32_t node) {  // node: the graph node scheduled, -1 a write-back
    if (node >= 0) add_node(b.kernel.nodes, node);
    if (last_ && merge(*last_, b)) return;
    b.kernel.name = "k" + std::to_string(p_.kernels.size());
    p_.kernels.push_back(b.kernel);
    // A kernel over a few scalars that neither reads what the open kernel writes nor writes what it
    // touches runs before it, and the open kernel stays open: an Adam step's bias corrections,
    // computed between a parameter's moments and its update, then do not keep those two apart
    // (one pass over the parameter's tensors instead of two).
    if (last_ && node >= 0 && scalar_kernel(b) && independent(last_->kernel, b.kernel)) {
      p_.steps.insert(p_.steps.begin() + static_cast<std::ptrdiff_t>(last_step_),
                      {Step::Kind::Kernel, static_cast<int32_t>(p_.kernels.size() - 1)});
      ++last_step_;
      return;
    }
    p_.steps.push_back({Step::Kind::Kernel, static_cast<int32_t>(p_.kernels.size() - 1)});
    last_built_ = std::move(b);
    last_ = &last_built_;
    last_kernel_ = p_.kernels.size() - 1;
    last_step_ = p_.steps.size() - 1;
  }

  static bool scalar_kernel(const Built& b) {
    int64_t points = 1;
    for (int64_t n : b.kernel.outer) points *= n;
    for (int64_t n : b.kernel.inner) points *= n;
    return points <= kScalarPoints;
  }

  // The values (alias roots for views) a kernel reads and writes.
  void touched(const Kernel& k, std::vector<ValueId>& reads, std::vector<ValueId>& writes) const {
    auto root = [&](ValueId v) {
      const ValuePlan& pl = p_.plans[static_cast<size_t>(v)];
      return pl.kind == ValuePlan::Kind::Alias ? pl.root : v;
    };
    for (const Stage& s : k.stages) {
      for (const Access& a : s.loads) reads.push_back(root(a.value));
      for (const Store& st : s.stores) writes.push_back(root(st.dst.value));
    }
  }

  // Whether a and b may run in either order: neither writes what the other reads or writes.
  bool independent(const Kernel& a, const Kernel& b) const {
    std::vector<ValueId> ar, aw, br, bw;
    touched(a, ar, aw);
    touched(b, br, bw);
    auto meets = [](const std::vector<ValueId>& x, const std::vector<ValueId>& y) {
      for (ValueId v : x)
        if (std::find(y.begin(), y.end(), v) != y.end()) return true;
      return false;
    };
    return !meets(aw, br) && !meets(aw, bw) && !meets(bw, ar);
  }

  // ---- 4. write-backs ---------------------------------------------------------------------------

  // Earlier steps read the inputs' old contents, so the write-back kernels come last and alone. A
  // write-back computes its final value in place (x.add_(1): load, add, store the same point)
  // unless its kernel would read a mutated input at another point than it writes
  // (x.copy_(x.flip(0))) or another mutated input (whose write-back may already have run): then
  // the value is materialised by an ordinary kernel first.
  //
  // A write-back whose value an ordinary kernel already stores (a buffer: the value has other
  // readers, as an optimizer's momentum that also updates its parameter) is stored by that kernel
  // into the input itself where nothing else reads the input's old contents: the value becomes
  // an alias of the input, its readers read the input, and neither the buffer nor the copy
  // kernel is made (SGD's step: a third less memory traffic, no allocation per call).
  void schedule_writebacks() {
    std::vector<Built> copies;
    for (const WriteBack& w : lg_.writebacks) copies.push_back(build_copy(w.value, w.input));
    std::vector<bool> direct(lg_.writebacks.size(), false);
    for (size_t i = 0; i < lg_.writebacks.size(); ++i) direct[i] = stores_directly(i, copies);
    for (size_t i = 0; i < lg_.writebacks.size(); ++i) {
      if (!direct[i]) continue;
      ValuePlan& pl = p_.plans[static_cast<size_t>(lg_.writebacks[i].value)];
      pl.kind = ValuePlan::Kind::Alias;
      pl.root = lg_.writebacks[i].input;
      direct_.push_back(lg_.writebacks[i].value);
    }
    // In a GPU graph the CPU scalars' write-backs (an optimizer's step counts) come last: GPU
    // kernels read those inputs by value when launched, so the ones before still see the old
    // counts and may write their own inputs in place.
    std::vector<size_t> order(lg_.writebacks.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_partition(order.begin(), order.end(), [&](size_t i) { return !host_value(lg_.writebacks[i].input); });
    std::vector<Built> last;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = order[k];
      if (direct[i]) continue;
      const WriteBack& w = lg_.writebacks[i];
      Built b = std::move(copies[i]);
      std::vector<ValueId> later;  // inputs written back after this one: still old when it runs
      for (size_t j = k + 1; j < order.size(); ++j)
        if (!direct[order[j]]) later.push_back(lg_.writebacks[order[j]].input);
      if (!writes_in_place(b, w.input, later)) {
        const NodeLowering* l = lowering_of(w.value);
        FD_CHECK(l && l->kind == NodeLowering::Kind::Pointwise && inline_[static_cast<size_t>(w.value)],
                 "write-back of v" + std::to_string(w.value) + " reads a mutated input yet is not inline");
        inline_[static_cast<size_t>(w.value)] = false;
        p_.plans[static_cast<size_t>(w.value)].kind = ValuePlan::Kind::Buffer;
        add_kernel(build_pointwise(w.value, *l), producer_[static_cast<size_t>(w.value)]);
        b = build_copy(w.value, w.input);
      }
      last.push_back(std::move(b));
    }
    for (Built& b : last) {
      last_ = nullptr;
      add_kernel(std::move(b), -1);
    }
    last_ = nullptr;
  }

  // Whether write-back i's value, a buffer one kernel stores, can be stored into its input by
  // that kernel (see schedule_writebacks): same layout; neither is returned; no extern step and
  // no other kernel (write-back kernels included: `copies`) reads the input's old contents; the
  // kernel itself reads them only where it stores the value, in the same stage.
  bool stores_directly(size_t i, const std::vector<Built>& copies) const {
    const WriteBack& w = lg_.writebacks[i];
    if (p_.plans[static_cast<size_t>(w.value)].kind != ValuePlan::Kind::Buffer) return false;
    const TensorMeta &mv = g_.meta(w.value), &mx = g_.meta(w.input);
    if (mv.sizes != mx.sizes || mv.strides != mx.strides || mv.storage_offset != mx.storage_offset || mv.dtype != mx.dtype ||
        mv.symbolic() || mx.symbolic())
      return false;
    for (ValueId o : g_.outputs)
      if (o == w.value || o == w.input) return false;
    for (const WriteBack& other : lg_.writebacks)
      if (other.input != w.input && other.value == w.value) return false;
    auto reads_input = [&](const Access& a) {
      const ValuePlan& pl = p_.plans[static_cast<size_t>(a.value)];
      return a.value == w.input || (pl.kind == ValuePlan::Kind::Alias && pl.root == w.input);
    };
    for (const Step& st : p_.steps) {
      if (st.kind != Step::Kind::Extern) continue;
      bool reads = false;
      for_each_value_input(g_.nodes[static_cast<size_t>(st.index)], [&](ValueId v) {
        const ValuePlan& pl = p_.plans[static_cast<size_t>(v)];
        reads = reads || v == w.input || (pl.kind == ValuePlan::Kind::Alias && pl.root == w.input);
      });
      if (reads) return false;
    }
    // An extern step may fail (an index out of range): the call is then replayed on ATen from
    // the caller's untouched tensors, so the value is stored early only after the last of them.
    int64_t last_extern = -1, writer_step = -1;
    for (size_t i = 0; i < p_.steps.size(); ++i) {
      if (p_.steps[i].kind == Step::Kind::Extern) last_extern = static_cast<int64_t>(i);
      else
        for (const Stage& s : p_.kernels[static_cast<size_t>(p_.steps[i].index)].stages)
          for (const Store& st : s.stores)
            if (st.dst.value == w.value) writer_step = static_cast<int64_t>(i);
    }
    if (writer_step < last_extern) return false;
    int writers = 0;
    for (const Kernel& k : p_.kernels) {
      bool stores = false;
      for (const Stage& s : k.stages)
        for (const Store& st : s.stores) stores = stores || st.dst.value == w.value;
      for (const Stage& s : k.stages) {
        const Store* own = nullptr;
        for (const Store& st : s.stores)
          if (st.dst.value == w.value) own = &st;
        for (const Access& a : s.loads)
          if (reads_input(a) && !(stores && own && a.value == w.input && a.index == own->dst.index)) return false;
      }
      writers += stores ? 1 : 0;
    }
    if (writers != 1) return false;
    for (size_t j = 0; j < copies.size(); ++j) {
      if (j == i) continue;
      for (const Stage& s : copies[j].kernel.stages)
        for (const Access& a : s.loads)
          if (reads_input(a)) return false;
    }
    return true;
  }

  // input[i] = value[i] over input's shape, value computed inline where it is inline.
  Built build_copy(ValueId value, ValueId input) {
    // NB: functionalize gives the value the input's dtype, so the stage is one load.
    FD_CHECK(g_.meta(value).dtype == g_.meta(input).dtype, "write-back of another dtype");
    Stage s;
    Access a;
    a.value = value;
    a.index = identity_map(g_.meta(input).sizes.size());
    s.loads.push_back(a);
    Instr ld;
    ld.op = Op::Load;
    ld.a = 0;
    ld.type = compute_type(g_.meta(input).dtype);
    s.instrs.push_back(ld);
    return build_store(std::move(s), 0, input);
  }

  bool writes_in_place(const Built& b, ValueId input, const std::vector<ValueId>& later) const {
    auto mutated = [&](ValueId v) {
      if (std::find(later.begin(), later.end(), v) != later.end()) return false;
      for (const WriteBack& w : lg_.writebacks)
        if (w.input == v) return true;
      return false;
    };
    for (const Stage& s : b.kernel.stages) {
      const Access* own = nullptr;
      for (const Store& st : s.stores)
        if (st.dst.value == input) own = &st.dst;
      for (const Access& a : s.loads) {
        const ValuePlan& pl = p_.plans[static_cast<size_t>(a.value)];
        // (a value stored directly into its input, by a kernel before every write-back kernel,
        // holds its final contents there)
        const bool direct = std::find(direct_.begin(), direct_.end(), a.value) != direct_.end();
        if (pl.kind == ValuePlan::Kind::Alias && mutated(pl.root) && !direct) return false;
        if (mutated(a.value) && !(a.value == input && own && a == *own)) return false;
      }
    }
    return true;
  }

  // ---- 3. merging ------------------------------------------------------------------------------

  // Where b's domain dims land in a's domain, or nullopt when b cannot join a.
  std::optional<std::pair<std::vector<AffineIndex>, bool /*per_outer*/>> placement(const Built& a, const Built& b) const {
    const size_t ad = static_cast<size_t>(a.kernel.dims());
    if (b.full == a.full) {
      if (b.pure_pointwise) {  // b's domain dim full_to_dom[k] is full dim k; so is a's
        std::vector<AffineIndex> m(b.full.size());
        for (size_t k = 0; k < b.full.size(); ++k) {
          AffineIndex ix = zero_index(ad);
          ix.coef[static_cast<size_t>(a.full_to_dom[k])] = 1;
          m[static_cast<size_t>(b.full_to_dom[k])] = ix;
        }
        return std::make_pair(m, false);
      }
      if (b.kernel.outer == a.kernel.outer && b.kernel.inner == a.kernel.inner && b.full_to_dom == a.full_to_dom)
        return std::make_pair(identity_map(ad), false);
      return std::nullopt;
    }
    if (!b.pure_pointwise) return std::nullopt;
    // An epilogue over a value a stores once per outer point.
    for (const Stage& s : a.kernel.stages) {
      if (!s.per_outer) continue;
      for (const Store& st : s.stores) {
        if (g_.meta(st.dst.value).sizes != b.full) continue;
        std::vector<AffineIndex> m(b.full.size());  // st.dst.index is per full dim of b
        for (size_t k = 0; k < b.full.size(); ++k) m[static_cast<size_t>(b.full_to_dom[k])] = st.dst.index[k];
        return std::make_pair(m, true);
      }
    }
    return std::nullopt;
  }

  bool merge(Built& a, Built& b) {
    auto place = placement(a, b);
    if (!place) return false;
    if (b.full.empty() && !a.full.empty() && !place->second) return false;
    Kernel merged = a.kernel;
    const int32_t red_base = [&] {
      int32_t n = 0;
      for (const Stage& s : a.kernel.stages) n += static_cast<int32_t>(s.reductions.size());
      return n;
    }();
    const int32_t stage_base = static_cast<int32_t>(a.kernel.stages.size());
    // b's first stage joins a's last stage itself when both loop over the inner dims: a
    // pointwise consumer then reads what that stage stores at the point as a register, and
    // independent reductions over the same input share one pass (horizontal fusion).
    const bool into_last = !place->second && !a.kernel.stages.empty() && !a.kernel.stages.back().per_outer &&
                           !b.kernel.stages.empty() && !b.kernel.stages.front().per_outer;
    const int32_t b_base = into_last ? stage_base - 1 : stage_base;
    std::vector<std::vector<int32_t>> maps;
    for (size_t k = 0; k < b.kernel.stages.size(); ++k) {
      const Stage& s = b.kernel.stages[k];
      // b's stages were built over b's own dims; re-place them into a's domain.
      const std::vector<AffineIndex>& dmap = place->first;
      bool per_outer = s.per_outer || place->second;
      maps.push_back(append_stage(merged, s, dmap, per_outer, red_base, b_base, &maps, into_last && k == 0));
    }
    if (!reads_are_safe(a.kernel, merged, b_base)) return false;
    for (Stage& s : merged.stages) compact_loads(s);
    for (int32_t n : b.kernel.nodes) add_node(merged.nodes, n);
    a.kernel = std::move(merged);
    p_.kernels[last_kernel_].stages = a.kernel.stages;
    p_.kernels[last_kernel_].nodes = a.kernel.nodes;
    a.pure_pointwise = a.pure_pointwise && b.pure_pointwise && into_last && merged.stages.size() == 1;
    return true;
  }

  // Every load in the new stages (from `first` on) of a value the old stages store must hit a
  // point the same outer iteration produced; per-outer stored values become registers.
  bool reads_are_safe(const Kernel& old, Kernel& merged, int32_t first) const {
    for (size_t s = static_cast<size_t>(std::max(first, 0)); s < merged.stages.size(); ++s) {
      Stage& st = merged.stages[s];
      for (Instr& in : st.instrs) {
        if (in.op != Op::Load) continue;
        const Access& a = st.loads[static_cast<size_t>(in.a)];
        bool written = false, matched = false;
        // A strided view of something this kernel writes reads other points of it: never safe.
        const ValuePlan& pl = p_.plans[static_cast<size_t>(a.value)];
        if (pl.kind == ValuePlan::Kind::Alias)
          for (const Stage& os : old.stages)
            for (const Store& w : os.stores)
              if (w.dst.value == pl.root) return false;
        for (size_t os = 0; os < old.stages.size(); ++os) {
          for (const Store& w : old.stages[os].stores) {
            if (w.dst.value != a.value) continue;
            written = true;
            if (!same_point(w.dst, a, merged)) continue;
            matched = true;
            if (old.stages[os].per_outer) {
              in.op = Op::StageValue;
              in.a = static_cast<int32_t>(os);
              in.b = w.instr;
            }
          }
        }
        // A store in the same (last) stage at the same point was already turned into a register;
        // one in an earlier new stage (b's own: softmax's exp, stored, then scaled in place) at the
        // same point is read as b alone read it, in the same outer iteration.
        for (size_t os = old.stages.size(); os < s && !written; ++os)
          for (const Store& w : merged.stages[os].stores) {
            if (w.dst.value != a.value) continue;
            written = true;
            matched = matched || same_point(w.dst, a, merged);
          }
        if (written && !matched) return false;
      }
    }
    return true;
  }

  // Drops loads no Load instr references any more (they became registers).
  static void compact_loads(Stage& s) {
    std::vector<Access> kept;
    for (Instr& in : s.instrs) {
      if (in.op != Op::Load) continue;
      const Access& a = s.loads[static_cast<size_t>(in.a)];
      size_t k = 0;
      while (k < kept.size() && !(kept[k] == a)) ++k;
      if (k == kept.size()) kept.push_back(a);
      in.a = static_cast<int32_t>(k);
    }
    s.loads = std::move(kept);
  }

  // ---- 5. dead stores ----------------------------------------------------------------------------

  void drop_dead_stores() {
    std::vector<bool> needed(g_.values.size(), false);
    for (ValueId v : g_.outputs) needed[static_cast<size_t>(v)] = true;
    for (const WriteBack& w : lg_.writebacks) needed[static_cast<size_t>(w.input)] = true;
    for (ValueId v : direct_) needed[static_cast<size_t>(v)] = true;  // its store is the write-back
    for (const Kernel& k : p_.kernels)
      for (const Stage& st : k.stages)
        for (const Access& a : st.loads) needed[static_cast<size_t>(a.value)] = true;
    auto need = [&](ValueId v) {
      needed[static_cast<size_t>(v)] = true;
      if (p_.plans[static_cast<size_t>(v)].kind == ValuePlan::Kind::Alias) needed[static_cast<size_t>(p_.plans[static_cast<size_t>(v)].root)] = true;
    };
    for (size_t v = 0; v < needed.size(); ++v)
      if (needed[v]) need(static_cast<ValueId>(v));
    // Extern steps, last first: a pure one whose outputs nothing reads any more is dropped (a
    // factory whose only reader was a cat that skips empty pieces, lowered into a kernel).
    for (size_t i = p_.steps.size(); i-- > 0;) {
      const Step& s = p_.steps[i];
      if (s.kind != Step::Kind::Extern) continue;
      const Node& n = g_.nodes[static_cast<size_t>(s.index)];
      const OpCategory c = op_info(n.op).category;
      // Only ops that cannot fail at run time once the metadata is known: a dead integer division
      // by a zero tensor must still raise as in eager.
      const bool pure = c == OpCategory::Factory || c == OpCategory::View;
      const bool used = std::any_of(n.outputs.begin(), n.outputs.end(), [&](ValueId o) { return needed[static_cast<size_t>(o)]; });
      if (pure && !used) {
        for (ValueId o : n.outputs) p_.plans[static_cast<size_t>(o)].kind = ValuePlan::Kind::None;
        p_.steps.erase(p_.steps.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      for_each_value_input(n, need);
    }
    for (Kernel& k : p_.kernels)
      for (Stage& st : k.stages)
        st.stores.erase(std::remove_if(st.stores.begin(), st.stores.end(),
                                       [&](const Store& s) { return !needed[static_cast<size_t>(s.dst.value)]; }),
                        st.stores.end());
    for (size_t v = 0; v < needed.size(); ++v)
      if (!needed[v] && p_.plans[v].kind == ValuePlan::Kind::Buffer) p_.plans[v].kind = ValuePlan::Kind::None;
    // Aliases of values that are no longer stored read through nothing: drop them too.
    for (size_t v = 0; v < needed.size(); ++v)
      if (p_.plans[v].kind == ValuePlan::Kind::Alias && p_.plans[static_cast<size_t>(p_.plans[v].root)].kind == ValuePlan::Kind::None)
        p_.plans[v].kind = ValuePlan::Kind::None;
  }

  const LoweredGraph& lg_;
  const Graph& g_;
  Program p_;
  std::vector<int32_t> producer_, out_index_;
  bool gpu_graph_ = false;  // some value is on a GPU (the cuda backend's graph)
  std::vector<bool> must_, inline_;
  std::vector<int64_t> uses_;
  std::vector<int> reads_;  // per pointwise value: buffers its inlined body loads
  std::vector<bool> expensive_;  // per pointwise value: its inlined body has a transcendental or gather
  std::vector<int64_t> reader_numel_;  // per value: most elements a pointwise reader computes from it
  std::vector<ValueId> direct_;  // write-back values stored directly into their inputs (schedule_writebacks)
  Built last_built_;
  Built* last_ = nullptr;
  size_t last_kernel_ = 0, last_step_ = 0;  // the open kernel's index in p_.kernels and p_.steps
  static constexpr int64_t kScalarPoints = 16;
};

}  // namespace

Program fuse(const LoweredGraph& lg) { return Fuser(lg).run(); }

}  // namespace fastdyn::codegen::loop
