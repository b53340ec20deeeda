// codegen/graph/graph.cpp — value semantics of the graph IR (metadata, arguments, whole graphs).
//
// Equality is structural and exact: it is what golden round trips (parse(print(g)) == g) and
// graph caches rely on. Doubles compare bit-for-bit in meaning: NaN equals NaN and 0.0 differs
// from -0.0, because both survive the text form and either could change an op's result.
#include <algorithm>
#include "codegen/graph/graph.h"

#include <cmath>

namespace fastdyn::codegen {
namespace {

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

bool same_node(const Node& a, const Node& b) {
  return a.op == b.op && a.args == b.args && a.outputs == b.outputs;
}

}  // namespace

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int64_t TensorMeta::nbytes() const { return numel() * static_cast<int64_t>(c10::elementSize(dtype)); }

bool TensorMeta::operator==(const TensorMeta& o) const {
  return dtype == o.dtype && device == o.device && sizes == o.sizes && strides == o.strides &&
         storage_offset == o.storage_offset && requires_grad == o.requires_grad && sym_sizes == o.sym_sizes &&
         sym_strides == o.sym_strides && sym_offset == o.sym_offset;
}

bool Arg::operator==(const Arg& o) const {
  if (kind != o.kind) return false;
  // Only the field the kind names is meaningful; the others keep their defaults or garbage.
  switch (kind) {
    case Kind::Value: return value == o.value;
    case Kind::ValueList: return values == o.values;
    case Kind::None: return true;
    case Kind::Int: return i == o.i && sym_ints == o.sym_ints;
    case Kind::Double: return same_double(d, o.d);
    case Kind::Bool: return b == o.b;
    case Kind::IntList: return ints == o.ints && sym_ints == o.sym_ints;
    case Kind::DType: return dtype == o.dtype;
    case Kind::Device: return device == o.device;
    case Kind::String: return str == o.str;
  }
  return false;
}

bool operator==(const Graph& a, const Graph& b) {
  if (a.values != b.values || a.inputs != b.inputs || a.outputs != b.outputs || a.symbols != b.symbols) return false;
  if (a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i)
    if (!same_node(a.nodes[i], b.nodes[i])) return false;
  return true;
}

bool traced_without_grad(const Graph& g) {
  // Every node recorded inside a block that turned grad mode off (torch.optim's step: its
  // in-place updates of parameters that require grad).
  if (!g.nodes.empty() && std::all_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.grad_mode == 0; }))
    return true;
  for (const Node& n : g.nodes) {
    const OpCategory c = op_info(n.op).category;
    if (c != OpCategory::Pointwise && c != OpCategory::Reduction && c != OpCategory::Extern) continue;
    bool grad_input = false;
    for_each_value_input(n, [&](ValueId v) { grad_input = grad_input || g.meta(v).requires_grad; });
    if (!grad_input) continue;
    for (ValueId v : n.outputs)
      if (c10::isFloatingType(g.meta(v).dtype) && !g.meta(v).requires_grad) return true;
  }
  return false;
}

bool writes_an_input(const Graph& g) { return first_input_write(g) < g.nodes.size(); }

size_t first_input_write(const Graph& g) {
  std::vector<bool> input_storage(g.values.size(), false);
  for (ValueId v : g.inputs) input_storage[static_cast<size_t>(v)] = true;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    const OpCategory c = op_info(n.op).category;
    if ((c != OpCategory::View && c != OpCategory::InPlace) || n.args.empty()) continue;
    const Arg& self = n.args[0];
    bool aliased = false;
    if (self.kind == Arg::Kind::Value) aliased = input_storage[static_cast<size_t>(self.value)];
    if (self.kind == Arg::Kind::ValueList)  // _foreach_*_ writes each tensor of its list
      for (ValueId v : self.values) aliased = aliased || (v >= 0 && input_storage[static_cast<size_t>(v)]);
    if (!aliased) continue;
    if (c == OpCategory::InPlace) return k;
    for (ValueId o : n.outputs) input_storage[static_cast<size_t>(o)] = true;
  }
  return g.nodes.size();
}

}  // namespace fastdyn::codegen
