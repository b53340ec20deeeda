// codegen/passes/stacked_scalars.cpp — see stacked_scalars.h.
#include "codegen/passes/stacked_scalars.h"

#include <algorithm>
#include <map>

namespace fastdyn::codegen {

Graph forward_stacked_scalars(const Graph& g) {
  std::vector<ValueId> written;  // what in-place ops write (their first argument)
  for (const Node& n : g.nodes)
    if (op_info(n.op).category == OpCategory::InPlace && !n.args.empty() && n.args[0].kind == Arg::Kind::Value)
      written.push_back(n.args[0].value);
  auto is_written = [&](ValueId v) { return std::find(written.begin(), written.end(), v) != written.end(); };
  std::map<ValueId, const Node*> stack_of;  // a stack's result -> its node (dim 0, 0-d items)
  for (const Node& n : g.nodes)
    if (n.op == OpId::stack && n.args.size() >= 1 && n.args[0].kind == Arg::Kind::ValueList &&
        (n.args.size() < 2 || (n.args[1].kind == Arg::Kind::Int && n.args[1].i == 0)) &&
        !is_written(n.outputs[0]) &&
        std::all_of(n.args[0].values.begin(), n.args[0].values.end(), [&](ValueId v) { return g.meta(v).dim() == 0 && !is_written(v); }))
      stack_of[n.outputs[0]] = &n;
  if (stack_of.empty()) return g;
  auto is_output = [&](ValueId v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  std::map<ValueId, ValueId> forward;  // a select's result -> the stacked scalar it is
  for (const Node& n : g.nodes) {
    if (n.op != OpId::select_int || n.args.size() < 3 || n.args[0].kind != Arg::Kind::Value) continue;
    auto s = stack_of.find(n.args[0].value);
    if (s == stack_of.end() || n.args[1].kind != Arg::Kind::Int || n.args[2].kind != Arg::Kind::Int || n.args[1].i != 0 ||
        is_output(n.outputs[0]) || is_written(n.outputs[0]))
      continue;
    const std::vector<ValueId>& items = s->second->args[0].values;
    int64_t i = n.args[2].i;
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) continue;
    const ValueId item = items[static_cast<size_t>(i)];
    if (g.meta(item).dtype != g.meta(n.outputs[0]).dtype || g.meta(item).device != g.meta(n.outputs[0]).device) continue;
    forward[n.outputs[0]] = item;
  }
  if (forward.empty()) return g;
  Graph out = g;
  out.nodes.clear();
  auto rename = [&](ValueId v) {
    auto f = forward.find(v);
    return f == forward.end() ? v : f->second;
  };
  for (const Node& n : g.nodes) {
    if (n.op == OpId::select_int && forward.count(n.outputs[0])) continue;
    Node m = n;
    for (Arg& a : m.args) {
      if (a.kind == Arg::Kind::Value) a.value = rename(a.value);
      if (a.kind == Arg::Kind::ValueList)
        for (ValueId& v : a.values) v = rename(v);
    }
    out.nodes.push_back(std::move(m));
  }
  // Stacks no node reads any more, and that are not returned, go.
  std::vector<Node> kept;
  for (size_t i = 0; i < out.nodes.size(); ++i) {
    const Node& n = out.nodes[i];
    if (n.op == OpId::stack && stack_of.count(n.outputs[0]) && !is_output(n.outputs[0])) {
      bool read = false;
      for (const Node& other : out.nodes)
        for_each_value_input(other, [&](ValueId v) { read = read || v == n.outputs[0]; });
      if (!read) continue;
    }
    kept.push_back(n);
  }
  out.nodes = std::move(kept);
  return out;
}

}  // namespace fastdyn::codegen
