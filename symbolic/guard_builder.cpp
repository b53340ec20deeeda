// symbolic/guard_builder.cpp — GuardSpec list -> runtime::GuardTree (see guard_builder.h).
#include "symbolic/guard_builder.h"

#include "codegen/shapes/propagate.h"
#include "runtime/errors.h"

#include <c10/core/MemoryFormat.h>

#include <algorithm>
#include <string_view>

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

// The tree's node for source s (made with its ancestors where missing). `known` holds the nodes
// of the sources met so far: guards share their sources' prefixes (every read under L['self']
// has it as an ancestor), which are found once, not once per guard (the walk from the root,
// each level a scan of its siblings by name, was a fifth of a GPT-2 compile).
runtime::GuardNode* node_for(runtime::GuardTree& tree, const Source& s,
                             std::unordered_map<const Source*, runtime::GuardNode*>& known) {
  if (auto it = known.find(&s); it != known.end()) return it->second;
  runtime::GuardNode* parent = s.parent ? node_for(tree, *s.parent, known) : nullptr;
  runtime::Accessor a;
  a.kind = access_kind(s.kind);
  a.index = s.index;
  a.name = s.name;
  a.object = s.object;  // Const: the tree takes its own reference
  runtime::GuardNode* n = tree.node(parent, a);
  known.emplace(&s, n);
  return n;
}

// Per graph input: true where no output's metadata can depend on the strides of the input's
// dims of size 1 (which address nothing), so that its guard need not check them. Its uses, and
// the uses of the views made of it, must all ignore strides (a contiguous copy, a matmul, an
// embedding lookup); a view of it that is an output, or any other use (a pointwise op's
// TensorIterator orders dims by stride; a preserve-format copy keeps them), keeps them exact.
// (Sizes that are symbols are checked row-major, size-1 dims skipped, in any case.)
std::vector<bool> size_one_strides_unobserved(const codegen::Graph& g) {
  using codegen::Arg;
  using codegen::Node;
  using codegen::OpId;
  using codegen::ValueId;
  std::vector<std::vector<const Node*>> uses(g.values.size());
  for (const Node& n : g.nodes)
    for (const Arg& a : n.args) {
      if (a.kind == Arg::Kind::Value) uses[static_cast<size_t>(a.value)].push_back(&n);
      for (ValueId v : a.values)
        if (v >= 0) uses[static_cast<size_t>(v)].push_back(&n);
    }
  auto contiguous_copy = [](const Node& n) {
    if (n.op != OpId::clone && n.op != OpId::_to_copy) return false;
    const Arg& f = n.op == OpId::clone ? n.args.at(1) : n.args.back();  // memory_format
    return f.kind == Arg::Kind::Int && f.i == static_cast<int64_t>(c10::MemoryFormat::Contiguous);
  };
  auto blind = [&](const Node& n) {
    const std::string_view rule = codegen::op_info(n.op).rule;
    return contiguous_copy(n) || rule == "Matmul" || rule == "Embedding";
  };
  auto is_output = [&](ValueId v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  std::vector<bool> out(g.inputs.size(), false);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    // The input itself as an output is returned as it is; a view of it, through as_strided with
    // the traced strides.
    std::vector<ValueId> work = {g.inputs[i]};
    bool free = true;
    for (size_t k = 0; free && k < work.size(); ++k)
      for (const Node* n : uses[static_cast<size_t>(work[k])]) {
        if (codegen::op_info(n->op).category != codegen::OpCategory::View) {
          free = blind(*n);
        } else {
          for (ValueId o : n->outputs) {
            free = free && !is_output(o);
            if (std::find(work.begin(), work.end(), o) == work.end()) work.push_back(o);
          }
        }
        if (!free) break;
      }
    out[i] = free;
  }
  return out;
}

}  // namespace

std::unique_ptr<runtime::GuardTree> build_guards(const TraceResult& trace) {
  auto tree = std::make_unique<runtime::GuardTree>();
  tree->guard_global_state();
  if (trace.no_record_function_observers) tree->guard_no_record_function_observers();
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
  std::unordered_map<const Source*, bool> size_one_free;  // by input source
  const std::vector<bool> unobserved = size_one_strides_unobserved(graph);
  for (size_t i = 0; i < unobserved.size(); ++i) size_one_free[trace.input_sources.at(i).get()] = unobserved[i];
  // A trace that mutated a list or dict the caller passed (its final contents replayed) relied
  // on which of the lists and dicts it read are one object: an append through one path shows
  // through another. Those keep their aliasing, as tensors and instances always do.
  const bool containers_aliased = std::any_of(trace.effects.begin(), trace.effects.end(), [](const TraceResult::SideEffect& e) {
    return e.kind == TraceResult::SideEffect::Kind::SetContents;
  });
  auto same_or_distinct = [&](runtime::GuardNode* n, PyObject* obj) {
    auto it = alias_slot.find(obj);
    if (it != alias_slot.end()) tree->add_same_as(n, it->second);
    else alias_slot.emplace(obj, tree->add_instance(n, obj));
  };
  std::unordered_map<const Source*, runtime::GuardNode*> known;  // NB: the sources outlive it (trace holds them)
  for (const GuardSpec& g : trace.guards) {
    runtime::GuardNode* n = node_for(*tree, *g.source, known);
    // A builtin is only what the name means while no global shadows it.
    if (g.source->kind == Source::Kind::Builtin) tree->add_global_absent(g.source->name);
    switch (g.kind) {
      case GuardKind::TypeIs: tree->add_type_is(n, Py_TYPE(g.obj)); break;
      case GuardKind::IdIs: tree->add_id_is(n, g.obj); break;
      case GuardKind::FunctionParts: tree->add_function_parts(n, g.obj); break;
      case GuardKind::Equals: tree->add_equals(n, g.obj); break;
      case GuardKind::TypeAndLen:
        tree->add_type_is(n, Py_TYPE(g.obj));
        tree->add_len_is(n, PyObject_Length(g.obj));
        if (containers_aliased && PyList_Check(g.obj)) same_or_distinct(n, g.obj);
        break;
      case GuardKind::TypeAttr: tree->add_type_attr(n, g.name, g.obj); break;
      case GuardKind::Lacks: tree->add_lacks(n, g.name); break;
      case GuardKind::DictKeys:
        tree->add_type_is(n, Py_TYPE(g.obj));
        tree->add_dict_keys(n, g.obj);
        if (containers_aliased && (PyDict_CheckExact(g.obj) || PyODict_CheckExact(g.obj))) same_or_distinct(n, g.obj);
        break;
      case GuardKind::Tensor:
      case GuardKind::Instance: {
        auto it = alias_slot.find(g.obj);
        if (it != alias_slot.end()) tree->add_same_as(n, it->second);
        else if (g.kind == GuardKind::Tensor) {
          auto d = dynamic.find(g.source.get());
          auto f = size_one_free.find(g.source.get());
          alias_slot.emplace(g.obj, d == dynamic.end() ? tree->add_tensor(n, g.obj, {}, {}, f != size_one_free.end() && f->second)
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
