// symbolic/guard_builder.cpp — GuardSpec list -> runtime::GuardTree (see guard_builder.h).
#include "symbolic/guard_builder.h"

#include <unordered_map>

namespace fastdyn::symbolic {
namespace {

runtime::AccessKind access_kind(Source::Kind k) {
  switch (k) {
    case Source::Kind::Local: return runtime::AccessKind::Local;
    case Source::Kind::Global: return runtime::AccessKind::Global;
    case Source::Kind::Builtin: return runtime::AccessKind::Builtin;
    case Source::Kind::Closure: return runtime::AccessKind::Closure;
    case Source::Kind::Attr: return runtime::AccessKind::Attr;
    case Source::Kind::Item: return runtime::AccessKind::Item;
    case Source::Kind::DictItem: return runtime::AccessKind::DictItem;
    case Source::Kind::Const: return runtime::AccessKind::Const;
  }
  return runtime::AccessKind::Local;
}

runtime::GuardNode* node_for(runtime::GuardTree& tree, const Source& s) {
  runtime::GuardNode* parent = s.parent ? node_for(tree, *s.parent) : nullptr;
  runtime::Accessor a;
  a.kind = access_kind(s.kind);
  a.index = s.index;
  a.name = s.name;
  a.object = s.object;  // Const: the tree takes its own reference
  return tree.node(parent, a);
}

}  // namespace

std::unique_ptr<runtime::GuardTree> build_guards(const TraceResult& trace) {
  auto tree = std::make_unique<runtime::GuardTree>();
  tree->guard_global_state();
  std::unordered_map<PyObject*, int> alias_slot;  // tensor or instance -> its alias slot
  // Input dims that are live size symbols (codegen/shapes/propagate.h), by the input's source.
  std::unordered_map<const Source*, std::vector<int64_t>> dynamic;
  for (const codegen::SymbolSource& s : trace.graph.symbols)
    if (!s.pinned) dynamic[trace.input_sources.at(static_cast<size_t>(s.input)).get()].push_back(s.dim);
  for (const GuardSpec& g : trace.guards) {
    runtime::GuardNode* n = node_for(*tree, *g.source);
    // A builtin is only what the name means while no global shadows it.
    if (g.source->kind == Source::Kind::Builtin) tree->add_global_absent(g.source->name);
    switch (g.kind) {
      case GuardKind::TypeIs: tree->add_type_is(n, Py_TYPE(g.obj)); break;
      case GuardKind::IdIs: tree->add_id_is(n, g.obj); break;
      case GuardKind::Equals: tree->add_equals(n, g.obj); break;
      case GuardKind::TypeAndLen:
        tree->add_type_is(n, Py_TYPE(g.obj));
        tree->add_len_is(n, PyObject_Length(g.obj));
        break;
      case GuardKind::TypeAttr: tree->add_type_attr(n, g.name, g.obj); break;
      case GuardKind::Lacks: tree->add_lacks(n, g.name); break;
      case GuardKind::DictKeys:
        tree->add_type_is(n, Py_TYPE(g.obj));
        tree->add_dict_keys(n, g.obj);
        break;
      case GuardKind::Tensor:
      case GuardKind::Instance: {
        auto it = alias_slot.find(g.obj);
        if (it != alias_slot.end()) tree->add_same_as(n, it->second);
        else if (g.kind == GuardKind::Tensor) {
          auto d = dynamic.find(g.source.get());
          alias_slot.emplace(g.obj, tree->add_tensor(n, g.obj, d == dynamic.end() ? std::vector<int64_t>{} : d->second));
        }
        else alias_slot.emplace(g.obj, tree->add_instance(n, g.obj));
        break;
      }
    }
  }
  return tree;
}

}  // namespace fastdyn::symbolic
