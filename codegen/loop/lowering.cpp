// codegen/loop/lowering.cpp — lower: each graph node becomes a pointwise definition, a view, a
// set of kernels, or an Extern step.
//
// Views become index maps here; pointwise-shaped ops take a row of lower_pointwise.cpp's table;
// reductions, normalisations, softmax and cat build kernels in lower_reductions.cpp
// (lowering_rules.h is what they share). An op without a lowering, or with a dtype the loops
// cannot compute, stays an Extern (ATen computes it, correctly, op by op). A graph that cannot run
// outside ATen at all (autograd, tensors on two devices, a mutation functionalize cannot express) throws
// Unsupported.
#include "codegen/loop/interpret.h"
#include "codegen/loop/lowering_rules.h"

#include <algorithm>
#include <optional>

namespace fastdyn::codegen::loop {
namespace {

using namespace lowering;

// ---- views -----------------------------------------------------------------------------------

// Base index as affine over view dims, for the view ops that are affine; nullopt otherwise.
std::optional<std::vector<AffineIndex>> view_map(const Graph& g, const Node& n, size_t out_index) {
  const TensorMeta& base = g.meta(n.args.at(0).value);
  const TensorMeta& view = g.meta(n.outputs.at(out_index));
  const int64_t vr = view.dim(), br = base.dim();
  auto arg_int = [&](size_t a, int64_t dflt) { return a < n.args.size() && n.args[a].kind == Arg::Kind::Int ? n.args[a].i : dflt; };
  auto wrapped = [&](int64_t d, int64_t rank) { return *wrap_dim(d, rank); };
  std::vector<AffineIndex> m;
  switch (n.op) {
    case OpId::alias:
    case OpId::detach:  // the same elements; only autograd sees a difference
      for (int64_t k = 0; k < br; ++k) m.push_back(dim_index(vr, k));
      return m;
    case OpId::permute: {
      m.resize(static_cast<size_t>(br));
      const std::vector<int64_t>& dims = n.args.at(1).ints;
      for (int64_t j = 0; j < vr; ++j) m[static_cast<size_t>(wrapped(dims[static_cast<size_t>(j)], br))] = dim_index(vr, j);
      return m;
    }
    case OpId::transpose_int: {
      int64_t d0 = wrapped(arg_int(1, 0), br), d1 = wrapped(arg_int(2, 0), br);
      for (int64_t k = 0; k < br; ++k) m.push_back(dim_index(vr, k == d0 ? d1 : k == d1 ? d0 : k));
      return m;
    }
    case OpId::expand: {
      const int64_t shift = vr - br;
      for (int64_t k = 0; k < br; ++k)
        m.push_back(base.sizes[static_cast<size_t>(k)] == 1 ? dim_index(vr, -1) : dim_index(vr, k + shift));
      return m;
    }
    case OpId::squeeze:
    case OpId::squeeze_dim:
    case OpId::squeeze_dims:
    case OpId::unsqueeze: {
      // Both only add or drop size-1 dims: walk the two size lists, matching non-1 sizes in order.
      int64_t j = 0;
      for (int64_t k = 0; k < br; ++k) {
        int64_t s = base.sizes[static_cast<size_t>(k)];
        if (n.op == OpId::unsqueeze) {
          int64_t d = wrapped(arg_int(1, 0), vr);
          if (j == d) ++j;
          m.push_back(dim_index(vr, j++));
          continue;
        }
        if (s == 1) {
          // dropped unless the view kept it (same count of dims remaining)
          if (vr - j > br - k - 1 && j < vr && view.sizes[static_cast<size_t>(j)] == 1) {
            m.push_back(dim_index(vr, j++));
          } else {
            m.push_back(dim_index(vr, -1));
          }
          continue;
        }
        while (j < vr && view.sizes[static_cast<size_t>(j)] != s) ++j;
        if (j >= vr) return std::nullopt;
        m.push_back(dim_index(vr, j++));
      }
      return m;
    }
    case OpId::select_int: {
      int64_t d = wrapped(arg_int(1, 0), br);
      int64_t i = arg_int(2, 0);
      const bool from_end = i < 0;  // x[:, -1] of a symbolic dim: the index is a size expression
      if (from_end) i += base.sizes[static_cast<size_t>(d)];
      for (int64_t k = 0; k < br; ++k)
        m.push_back(k == d ? dim_index(vr, -1, 0, i) : dim_index(vr, k < d ? k : k - 1));
      if (from_end) set_sym_constant(m[static_cast<size_t>(d)], arg_int(2, 0) + base.size_expr(static_cast<size_t>(d)));
      return m;
    }
    case OpId::slice_Tensor: {
      int64_t d = wrapped(arg_int(1, 0), br);
      const int64_t size = base.sizes[static_cast<size_t>(d)];
      int64_t start = arg_int(2, 0), step = arg_int(4, 1);
      const bool from_end = start < 0 && start + size >= 0;  // x[:, -1:]: a size expression, unclamped
      if (start < 0) start += size;
      start = std::min(std::max<int64_t>(start, 0), size);
      for (int64_t k = 0; k < br; ++k) m.push_back(k == d ? dim_index(vr, k, step, start) : dim_index(vr, k));
      if (from_end) set_sym_constant(m[static_cast<size_t>(d)], arg_int(2, 0) + base.size_expr(static_cast<size_t>(d)));
      return m;
    }
    case OpId::split_Tensor:
    case OpId::split_with_sizes:
    case OpId::tensor_split_sections:
    case OpId::tensor_split_indices:
    case OpId::unbind_int: {
      const size_t dim_arg = n.op == OpId::unbind_int ? 1 : 2;
      int64_t d = wrapped(arg_int(dim_arg, 0), br);
      int64_t start = 0;
      for (size_t o = 0; o < out_index; ++o)
        start += n.op == OpId::unbind_int ? 1 : g.meta(n.outputs[o]).sizes[static_cast<size_t>(d)];
      for (int64_t k = 0; k < br; ++k) {
        if (n.op == OpId::unbind_int) m.push_back(k == d ? dim_index(vr, -1, 0, start) : dim_index(vr, k < d ? k : k - 1));
        else m.push_back(k == d ? dim_index(vr, k, 1, start) : dim_index(vr, k));
      }
      return m;
    }
    default: return std::nullopt;
  }
}

// ---- the node dispatcher ---------------------------------------------------------------------

bool all_types_ok(const Graph& g, const Node& n) {
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::Value && compute_type(g.meta(a.value).dtype) == ST::Undefined) return false;
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId v : a.values)
        if (v < 0 || compute_type(g.meta(v).dtype) == ST::Undefined) return false;
  }
  for (ValueId v : n.outputs)
    if (compute_type(g.meta(v).dtype) == ST::Undefined) return false;
  return true;
}

// Dispatches on ops.def's Lower column: a View becomes index maps, a Kernel or Pointwise op takes
// its row of the lowering tables, anything else runs as an extern ATen call.
NodeLowering lower_node(const Graph& g, const Node& n) {
  NodeLowering out;
  const OpInfo& info = op_info(n.op);
  Ctx c{g, n};
  if (info.lowering == Lowering::View) {
    out.kind = NodeLowering::Kind::View;
    if (n.op == OpId::view_dtype) throw Unsupported("aten::view.dtype reinterprets memory");
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      NodeLowering::View v;
      v.base = n.args.at(0).value;
      if (auto m = view_map(g, n, o)) {
        v.affine = true;
        v.map = std::move(*m);
      }
      out.views.push_back(std::move(v));
    }
    return out;
  }
  out.kind = NodeLowering::Kind::Extern;
  if (info.lowering != Lowering::Pointwise && info.lowering != Lowering::Kernel) {
    out.why = "no lowering";
    return out;
  }
  if (!all_types_ok(g, n)) {
    out.why = "dtype";
    return out;
  }
  if (info.lowering == Lowering::Kernel) {
    const KernelRule* rule = find_kernel(n.op);
    FD_CHECK(rule, "ops.def lowers " + qualified_name(n.op) + " as a Kernel, but it has no kernel rule");
    if ((*rule)(c, out)) return out;
    out.kernels.clear();
    out.kind = NodeLowering::Kind::Extern;
    out.why = "no lowering for these arguments";
    return out;
  }
  // Pointwise-shaped nodes: one output, a body over the output's dims.
  const PointwiseRule* rule = find_pointwise(n.op);
  FD_CHECK(rule, "ops.def lowers " + qualified_name(n.op) + " as Pointwise, but it has no pointwise rule");
  if (n.outputs.size() != 1) return out;
  const TensorMeta& res = c.out();
  ST t = compute_type(res.dtype);
  Builder b(res.dim());
  int32_t r = (*rule)(b, c, t);
  if (r < 0) {
    out.why = "no lowering for these dtypes";
    return out;
  }
  out.kind = NodeLowering::Kind::Pointwise;
  out.result = rounded(b, b.cast(r, t), res.dtype);
  out.body = std::move(b.st);
  return out;
}

}  // namespace

LoweredGraph lower(const Graph& original) {
  // Kernels run on one device: the CPU (llvm_cpu) or one GPU (cuda), beside which a GPU graph may
  // hold CPU scalars (interpret.h: the cuda backend computes them on the host and passes them by
  // value). Moving data between devices stays ATen's business.
  c10::Device device = original.values.empty() ? c10::Device(c10::kCPU) : original.values.front().device;
  for (const TensorMeta& m : original.values)
    if (!m.device.is_cpu()) device = m.device;
  for (const TensorMeta& m : original.values)
    if (m.device != device && !(device.is_cuda() && host_scalar(m)))
      throw Unsupported("tensors on " + device.str() + " and " + m.device.str());
  LoweredGraph lg;
  Functional f = functionalize(original);
  lg.graph = std::move(f.graph);
  lg.writebacks = std::move(f.writebacks);
  lg.extern_writes = std::move(f.extern_writes);
  const Graph& g = lg.graph;
  // A view of a tensor that requires grad requires grad too, also outside grad mode, where nothing
  // records a backward: such views need no autograd (the runtime's own views, made in the same
  // mode, carry the same flag as eager's). Graphs traced in grad mode come here split by
  // codegen/autograd/joint.h, with no value that requires grad.
  // Outside grad mode an in-place update of a tensor that requires grad (an optimizer's step on
  // its parameters) is a value that requires grad too, although nothing records a backward: one
  // that only goes back into its input (a write-back, not an output) is plain data.
  // NB: asked of the traced graph only. The functional one gives an in-place op the meta of the
  // input it writes (x.sub_(y * w) on an x that needs no grad: a result that "does not require
  // grad" from an input that does), which read as a graph traced without grad and let the write
  // of a value that requires grad lower natively: eager's x joins the autograd graph there.
  const bool without_grad = traced_without_grad(original);
  std::vector<bool> returned(g.values.size(), false);
  for (ValueId o : g.outputs) returned[static_cast<size_t>(o)] = true;
  for (const Node& n : g.nodes) {
    const OpInfo& info = op_info(n.op);
    if (info.category == OpCategory::InPlace && info.lowering != Lowering::Extern)  // functionalize left it: a bug
      throw Unsupported(std::string("in-place op aten::") + info.aten + " mutates a tensor");
    for (ValueId v : n.outputs)
      if (g.meta(v).requires_grad && !(without_grad && (info.category == OpCategory::View || !returned[static_cast<size_t>(v)])))
        throw Unsupported("autograd: " + print_node(g, n) + " requires grad");
    try {
      lg.nodes.push_back(lower_node(g, n));
    } catch (const InternalError& e) {  // name the node: what a strict-mode test failure shows
      throw InternalError(std::string(e.what()) + " lowering " + print_node(g, n));
    }
  }
  return lg;
}

}  // namespace fastdyn::codegen::loop
