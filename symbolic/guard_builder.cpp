// symbolic/guard_builder.cpp — GuardSpec list -> runtime::GuardTree (see guard_builder.h).
#include "symbolic/guard_builder.h"

#include "codegen/shapes/propagate.h"
#include "runtime/errors.h"

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
  // Input dims that are live size symbols (codegen/shapes/propagate.h), by the input's source,
  // each with the symbol it binds: its own, or the one it was unified with (the guard then
  // checks the two dims equal).
  struct Dims {
    std::vector<int64_t> dims;
    std::vector<int32_t> symbols;
  };
  std::unordered_map<const Source*, Dims> dynamic;
  const codegen::Graph& graph = trace.graph;
  for (size_t k = 0; k < graph.symbols.size(); ++k) {
    const codegen::SymbolSource& s = graph.symbols[k];
    const codegen::shapes::SymbolId r = codegen::shapes::root(graph, static_cast<codegen::shapes::SymbolId>(k));
    if (graph.symbols[static_cast<size_t>(r)].pinned) continue;
    Dims& d = dynamic[trace.input_sources.at(static_cast<size_t>(s.input)).get()];
    d.dims.push_back(s.dim);
    d.symbols.push_back(r);
  }
  // What comparisons of sizes relied on, over the symbols left live.
  for (const codegen::shapes::Relation& rel : trace.size_relations) {
    const codegen::shapes::SizeExpr e = codegen::shapes::live(graph, rel.lhs - rel.rhs);
    if (e.is_constant()) continue;  // its symbols were specialised: the exact sizes imply it
    const std::optional<codegen::shapes::SizeExpr::Linear> l = e.linear();
    if (!l) throw InternalError("guards: a size relation is not linear: " + rel.str());
    runtime::SizeRelation r;
    using K = codegen::shapes::Relation::Kind;
    if (rel.kind == K::Divisible) throw InternalError("guards: divisibility relations are not recorded by the trace");
    r.kind = rel.kind == K::Eq ? runtime::SizeRelation::Kind::Eq : rel.kind == K::Ne ? runtime::SizeRelation::Kind::Ne : runtime::SizeRelation::Kind::Ge;
    r.constant = l->constant;
    r.terms = l->terms;
    tree->add_relation(std::move(r));
  }
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
          alias_slot.emplace(g.obj, d == dynamic.end() ? tree->add_tensor(n, g.obj)
                                                     : tree->add_tensor(n, g.obj, d->second.dims, d->second.symbols));
        }
        else alias_slot.emplace(g.obj, tree->add_instance(n, g.obj));
        break;
      }
    }
  }
  return tree;
}

}  // namespace fastdyn::symbolic
