// codegen/passes/attention_decompose.cpp — decompose_small_attention (see attention_decompose.h).
#include "codegen/passes/attention_decompose.h"

#include "codegen/capture/meta_rules.h"
#include "codegen/shapes/propagate.h"

#include <cmath>
#include <limits>

namespace fastdyn::codegen {
namespace {

bool is_false(const Arg& a) { return a.kind == Arg::Kind::Bool && !a.b; }
bool is_zero(const Arg& a) {
  return (a.kind == Arg::Kind::Double && a.d == 0.0) || (a.kind == Arg::Kind::Int && a.i == 0);
}

// The scale the call uses, or NaN when the node is not one we write out.
double decomposable(const Graph& g, const Node& n) {
  const double no = std::numeric_limits<double>::quiet_NaN();
  if (n.op != OpId::scaled_dot_product_attention || n.args.size() != 8) return no;
  for (int i = 0; i < 3; ++i)
    if (n.args[static_cast<size_t>(i)].kind != Arg::Kind::Value) return no;
  if (!is_zero(n.args[4]) || !is_false(n.args[5]) || !is_false(n.args[7])) return no;
  const TensorMeta &q = g.meta(n.args[0].value), &k = g.meta(n.args[1].value), &v = g.meta(n.args[2].value);
  for (const TensorMeta* t : {&q, &k, &v})
    if (t->dtype != c10::ScalarType::Float || !t->device.is_cpu() || t->requires_grad || t->dim() < 3 ||
        t->dim() != q.dim())
      return no;
  const size_t r = q.sizes.size();
  for (size_t d = 0; d + 2 < r; ++d)
    if (q.sizes[d] != k.sizes[d] || q.sizes[d] != v.sizes[d]) return no;
  if (q.sizes[r - 1] != k.sizes[r - 1] || k.sizes[r - 2] != v.sizes[r - 2]) return no;
  const Arg& mask = n.args[3];
  if (mask.kind == Arg::Kind::Value) {
    const c10::ScalarType mt = g.meta(mask.value).dtype;
    if (mt != c10::ScalarType::Bool && mt != c10::ScalarType::Float) return no;
    if (g.meta(mask.value).dim() < 2) return no;  // ATen raises for a 1-d mask: its call says so
  } else if (mask.kind != Arg::Kind::None) {
    return no;
  }
  int64_t scores = q.numel() / std::max<int64_t>(q.sizes[r - 1], 1) * k.sizes[r - 2];
  if (scores > kMaxScoresElements) return no;
  if (n.args[6].kind == Arg::Kind::Double) return n.args[6].d;
  if (n.args[6].kind == Arg::Kind::None) return 1.0 / std::sqrt(static_cast<double>(q.sizes[r - 1]));
  return no;
}

// A fresh contiguous tensor of `sizes` (expressions over the graph's size symbols, next to their
// numbers at the graph's binding): symbolic where a size is, so that the kernels reading it take
// that size as an argument (codegen/llvm/emit.h) and serve every binding.
TensorMeta dense(const TensorMeta& like, const std::vector<shapes::SizeExpr>& sym, std::vector<int64_t> sizes,
                 c10::ScalarType dtype) {
  TensorMeta m;
  m.dtype = dtype;
  m.device = like.device;
  m.strides = contiguous_strides(sizes);
  m.sizes = std::move(sizes);
  for (const shapes::SizeExpr& e : sym)
    if (!e.is_constant()) {
      m.sym_sizes = sym;
      m.sym_strides = shapes::contiguous_strides(sym);
      break;
    }
  return m;
}

// Dims [0, r - 1) of `a` and then dim `last` of `b`: sizes and their expressions.
struct Shape {
  std::vector<shapes::SizeExpr> sym;
  std::vector<int64_t> sizes;
};
Shape leading_then(const TensorMeta& a, const TensorMeta& b, size_t last) {
  Shape s;
  for (size_t d = 0; d + 1 < a.sizes.size(); ++d) {
    s.sym.push_back(a.size_expr(d));
    s.sizes.push_back(a.sizes[d]);
  }
  s.sym.push_back(b.size_expr(last));
  s.sizes.push_back(b.sizes[last]);
  return s;
}

void write_out(Graph& out, const Node& n, double scale) {
  const ValueId q = n.args[0].value, k = n.args[1].value, v = n.args[2].value;
  const TensorMeta qm = out.meta(q), km = out.meta(k), vm = out.meta(v);
  const size_t r = qm.sizes.size();
  TensorMeta ktm = km;  // k.transpose(-2, -1): a view
  std::swap(ktm.sizes[r - 1], ktm.sizes[r - 2]);
  std::swap(ktm.strides[r - 1], ktm.strides[r - 2]);
  if (ktm.symbolic()) {
    std::swap(ktm.sym_sizes[r - 1], ktm.sym_sizes[r - 2]);
    std::swap(ktm.sym_strides[r - 1], ktm.sym_strides[r - 2]);
  }
  const ValueId kt = out.add_node(OpId::transpose_int, {Arg::of_value(k), Arg::of_int(-2), Arg::of_int(-1)}, ktm);
  const Shape ss = leading_then(qm, km, r - 2);
  const TensorMeta sm = dense(qm, ss.sym, ss.sizes, qm.dtype);
  ValueId s = out.add_node(OpId::matmul, {Arg::of_value(q), Arg::of_value(kt)}, sm);
  s = out.add_node(OpId::mul_Scalar, {Arg::of_value(s), Arg::of_double(scale)}, sm);
  if (n.args[3].kind == Arg::Kind::Value) {
    const ValueId mask = n.args[3].value;
    const TensorMeta& mm = out.meta(mask);
    if (mm.dtype == c10::ScalarType::Bool) {  // True attends: the others become -inf
      TensorMeta notm = mm;
      notm.strides = tensor_iterator_strides(mm.sizes, {&mm});
      notm.storage_offset = 0;
      notm.sym_offset.clear();
      // Symbolic only where its layout is the contiguous one (the expressions of other layouts
      // are not derived here: the kernel then has that value's sizes as constants).
      if (notm.symbolic() && notm.strides == contiguous_strides(notm.sizes)) {
        notm.sym_strides = shapes::contiguous_strides(notm.sym_sizes);
      } else {
        notm.sym_sizes.clear();
        notm.sym_strides.clear();
      }
      const ValueId off = out.add_node(OpId::logical_not, {Arg::of_value(mask)}, notm);
      s = out.add_node(OpId::masked_fill_Scalar,
               {Arg::of_value(s), Arg::of_value(off), Arg::of_double(-std::numeric_limits<double>::infinity())}, sm);
    } else {
      s = out.add_node(OpId::add_Tensor, {Arg::of_value(s), Arg::of_value(mask), Arg::of_int(1)}, sm);
    }
  }
  ValueId p = out.add_node(OpId::softmax_int, {Arg::of_value(s), Arg::of_int(-1), Arg::none()}, sm);
  if (n.args[3].kind == Arg::Kind::Value) {
    // A row the mask blocks entirely: the fused kernel gives 0 where softmax gives NaN. A NaN in
    // the scores still gives NaN (max propagates it, and NaN == -inf is false).
    Shape rs = ss;
    rs.sizes.back() = 1;
    rs.sym.back() = 1;
    const ValueId mx = out.add_node(OpId::amax, {Arg::of_value(s), Arg::of_ints({-1}), Arg::of_bool(true)},
                            dense(qm, rs.sym, rs.sizes, qm.dtype));
    const double inf = std::numeric_limits<double>::infinity();
    const ValueId none = out.add_node(OpId::eq_Scalar, {Arg::of_value(mx), Arg::of_double(-inf)},
                              dense(qm, rs.sym, rs.sizes, c10::ScalarType::Bool));
    p = out.add_node(OpId::masked_fill_Scalar, {Arg::of_value(p), Arg::of_value(none), Arg::of_double(0.0)}, sm);
  }
  const Shape os = leading_then(qm, vm, r - 1);
  const ValueId o = out.add_node(OpId::matmul, {Arg::of_value(p), Arg::of_value(v)}, dense(qm, os.sym, os.sizes, qm.dtype));
  Node copy;  // into the call's own value and layout
  copy.op = OpId::clone;
  copy.args = {Arg::of_value(o), Arg::none()};
  copy.outputs = n.outputs;
  out.nodes.push_back(std::move(copy));
}

}  // namespace

Graph decompose_small_attention(const Graph& g) {
  Graph out;
  out.values = g.values;
  out.binding = g.binding;
  out.inputs = g.inputs;
  out.outputs = g.outputs;
  bool any = false;
  for (const Node& n : g.nodes) {
    const double scale = decomposable(g, n);
    if (std::isnan(scale)) {
      out.nodes.push_back(n);
      continue;
    }
    any = true;
    write_out(out, n, scale);
  }
  return any ? out : g;
}

}  // namespace fastdyn::codegen
