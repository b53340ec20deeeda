// codegen/capture/capture.cpp — record_call: dispatches a Family to its binder through a table generated
// from families.def, and makes recording transactional and crash-free.
//
// NB: a binder may fail after appending some nodes (a multi-node family that meets a bad argument
// late), or throw (an InternalError from a BoundArgs accessor, a std::out_of_range from a bad
// ValueId). Either way record_call truncates the graph back to what it was and returns
// CaptureResult::fail naming the family, so symbolic/ can graph-break on a clean graph.
#include "codegen/capture/autocast.h"
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"
#include "codegen/shapes/propagate.h"

#include "runtime/errors.h"

#include <algorithm>
#include <exception>

namespace fastdyn::codegen {

namespace {

using Binder = CaptureResult (*)(BindCall&);

struct FamilyRow {
  const char* name;
  std::vector<const char*> python_names;
  Binder bind;
};

const std::vector<FamilyRow>& family_table() {
  static const std::vector<FamilyRow> table = {
#define FD_FAMILY(id, ...) FamilyRow{#id, {__VA_ARGS__}, &bind_##id},
#include "codegen/capture/families.def"
  };
  return table;
}

const FamilyRow& row(Family f) {
  const auto& t = family_table();
  auto i = static_cast<size_t>(f);
  FD_CHECK(i < t.size(), "family id " + std::to_string(i) + " out of range");
  return t[i];
}

// The value whose storage v lives in: through view nodes and in-place nodes (whose result is
// their self) back to a graph input or a value a node made.
ValueId storage_root(const Graph& g, const CaptureContext& ctx, ValueId v) {
  auto input_root = [&](ValueId in) {
    for (const auto& [alias, first] : ctx.input_storage_alias)
      if (alias == in) return first;
    return in;
  };
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const Node& n = g.nodes[k];
    if (std::find(n.outputs.begin(), n.outputs.end(), v) == n.outputs.end()) continue;
    const OpCategory c = op_info(n.op).category;
    if ((c != OpCategory::View && c != OpCategory::InPlace) || n.args.empty() || n.args[0].kind != Arg::Kind::Value)
      return v;
    v = n.args[0].value;
  }
  return input_root(v);
}

// ATen's check on an in-place write (TensorIterator's assert_no_partial_overlap, copy_'s too):
// an input that shares memory with the written tensor without being the same elements in the
// same order (x.sub_(x.t()), x.add_(x[0])) raises. Returns whether `in` would.
bool partially_overlaps(const Graph& g, const CaptureContext& ctx, ValueId out, ValueId in) {
  if (in == out || storage_root(g, ctx, in) != storage_root(g, ctx, out)) return false;
  const TensorMeta& a = g.meta(out);
  const TensorMeta& b = g.meta(in);
  if (a.numel() == 0 || b.numel() == 0) return false;
  if (!is_non_overlapping_and_dense(a) || !is_non_overlapping_and_dense(b)) return false;  // ATen: too hard to tell
  const int64_t a_begin = a.storage_offset * static_cast<int64_t>(c10::elementSize(a.dtype)), a_end = a_begin + a.nbytes();
  const int64_t b_begin = b.storage_offset * static_cast<int64_t>(c10::elementSize(b.dtype)), b_end = b_begin + b.nbytes();
  if (a_begin == b_begin && a_end == b_end) return a.strides != b.strides;
  return a_begin < b_end && b_begin < a_end;
}

// An in-place node that eager would refuse: not recorded, so that the trace breaks before it and
// the op raises eagerly, on its own line, after everything before it has run.
std::string refused_write(const Graph& g, const CaptureContext& ctx, size_t first_node) {
  for (size_t k = first_node; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (op_info(n.op).category != OpCategory::InPlace || n.args.empty() || n.args[0].kind != Arg::Kind::Value) continue;
    if (ctx.grad_enabled && !ctx.grad_leaf_inputs.empty()) {
      const ValueId root = storage_root(g, ctx, n.args[0].value);
      if (std::find(ctx.grad_leaf_inputs.begin(), ctx.grad_leaf_inputs.end(), root) != ctx.grad_leaf_inputs.end())
        return std::string("aten::") + op_info(n.op).aten +
               " writes into a leaf that requires grad, or a view of one (eager raises in grad mode)";
    }
    for (size_t a = 1; a < n.args.size(); ++a)
      if (n.args[a].kind == Arg::Kind::Value && partially_overlaps(g, ctx, n.args[0].value, n.args[a].value))
        return std::string("aten::") + op_info(n.op).aten + " reads memory it partially overwrites (eager raises)";
  }
  return {};
}

bool has_symbolic_ints(const CallArg& a) {
  if (!a.sym.empty()) return true;
  for (const CallArg& i : a.items)
    if (has_symbolic_ints(i)) return true;
  return false;
}

bool has_symbolic_ints(const std::vector<CallArg>& args, const std::vector<std::pair<std::string, CallArg>>& kwargs) {
  for (const CallArg& a : args)
    if (has_symbolic_ints(a)) return true;
  for (const auto& kv : kwargs)
    if (has_symbolic_ints(kv.second)) return true;
  return false;
}

}  // namespace

const char* family_name(Family f) { return row(f).name; }

const std::vector<const char*>& family_python_names(Family f) { return row(f).python_names; }

CaptureResult record_call(Graph& g, const CaptureContext& ctx, Family family, const std::vector<CallArg>& args,
                          const std::vector<std::pair<std::string, CallArg>>& kwargs) {
  const size_t n_values = g.values.size();
  const size_t n_nodes = g.nodes.size();
  CaptureResult result;
  std::string name = "?";
  try {
    const FamilyRow& r = row(family);
    name = r.name;
    // Size-derived ints reach only binders that record their expressions; for the others they
    // are numbers, and their sizes are specialised.
    std::vector<CallArg> plain_args;
    std::vector<std::pair<std::string, CallArg>> plain_kwargs;
    const bool sym_args = has_symbolic_ints(args, kwargs);
    if (sym_args && !shapes::takes_symbolic_ints(family)) {
      plain_args = args;
      plain_kwargs = kwargs;
      shapes::pin_call_args(g, plain_args, plain_kwargs, std::string(row(family).name) + "() takes it as a number");
    }
    const bool plain = sym_args && !shapes::takes_symbolic_ints(family);
    std::vector<CallArg> cast_args;
    std::vector<std::pair<std::string, CallArg>> cast_kwargs;
    const std::vector<CallArg>* bind_args = plain ? &plain_args : &args;
    const std::vector<std::pair<std::string, CallArg>>* bind_kwargs = plain ? &plain_kwargs : &kwargs;
    if (ctx.autocast.any()) {  // eager's casts first, then the binder sees eager's dtypes
      cast_args = *bind_args;
      cast_kwargs = *bind_kwargs;
      autocast::cast_call_args(g, ctx, family, cast_args, cast_kwargs);
      bind_args = &cast_args;
      bind_kwargs = &cast_kwargs;
    }
    BindCall call{g, ctx, family, *bind_args, *bind_kwargs};
    {
      autocast::Scope scope(ctx);
      result = r.bind(call);
    }
    if (!result.ok && result.reason.empty()) result.reason = name + ": unsupported call";
    if (result.ok) {
      std::string refused = refused_write(g, ctx, n_nodes);
      if (refused.empty()) refused = autocast::check_family(g, ctx, family, n_nodes);
      if (!refused.empty()) result = CaptureResult::fail(name + ": " + refused);
    }
  } catch (const std::exception& e) {
    result = CaptureResult::fail(name + ": " + e.what());
  } catch (...) {
    result = CaptureResult::fail(name + ": unknown exception while recording");
  }
  if (!result.ok) {
    g.nodes.resize(n_nodes);
    g.values.resize(n_values);
  }
  return result;
}

}  // namespace fastdyn::codegen
