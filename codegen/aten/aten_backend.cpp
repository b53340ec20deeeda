// codegen/aten/aten_backend.cpp — compile_aten: a graph becomes a flat list of boxed dispatcher calls.
//
// Compile time, per node: find the c10::OperatorHandle, match each Arg against the schema
// argument of the same position (a table of schema type kind x Arg kind, each with its
// conversion to c10::IValue), and note after which step each value is last used so that
// intermediates are freed as soon as possible. Run time: a value table of tensors (inputs first);
// per step push operands onto a reused stack, callBoxed, move the returned tensors into the
// table. NB: in-place ops (add_.Tensor) return their mutated argument; the output value simply
// aliases it, exactly as in eager mode.
//
// A graph with live size symbols (codegen/shapes/propagate.h) compiles to one executable for
// every size: an int or int list argument whose expressions mention a symbol is evaluated at each
// call from the inputs' sizes (symbol k is inputs[k.input].size(k.dim)), where the guards already
// checked every relation the trace relied on. A dynamic entry then needs no aten executable per
// size (the baseline while kernels compile, the aten backend itself).
#include "codegen/aten/aten_backend.h"

#include "codegen/shapes/propagate.h"

#include "runtime/errors.h"
#include "runtime/graph_calls.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <variant>

namespace fastdyn::codegen {
namespace {

// ---- schema argument matching -------------------------------------------------------------

const char* arg_kind_name(Arg::Kind k) {
  switch (k) {
    case Arg::Kind::Value: return "a tensor value";
    case Arg::Kind::ValueList: return "a tensor list";
    case Arg::Kind::None: return "None";
    case Arg::Kind::Int: return "an int";
    case Arg::Kind::Double: return "a double";
    case Arg::Kind::Bool: return "a bool";
    case Arg::Kind::IntList: return "an int list";
    case Arg::Kind::DType: return "a dtype";
    case Arg::Kind::Device: return "a device";
    case Arg::Kind::String: return "a string";
  }
  return "?";
}

// Constant (non-tensor) arguments: which Arg kind fits which schema type, and how it becomes an
// IValue. NB: Layout and MemoryFormat have no Arg kind of their own; they travel as Int (their
// c10 enum value), which is also how an IValue stores them. We match on Argument::real_type():
// type() reports ScalarType/Layout/MemoryFormat as plain int, hiding what we must check; a
// graph's SymInts are always concrete, so they take plain ints.
struct Conversion {
  c10::TypeKind type;
  Arg::Kind arg;
  c10::IValue (*convert)(const Arg&);
};

const Conversion kConversions[] = {
    {c10::TypeKind::IntType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(a.i); }},
    {c10::TypeKind::SymIntType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(a.i); }},
    {c10::TypeKind::FloatType, Arg::Kind::Double, [](const Arg& a) { return c10::IValue(a.d); }},
    // Python passes ints where floats are expected (eps=0); a boxed float argument must be Double.
    {c10::TypeKind::FloatType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(static_cast<double>(a.i)); }},
    {c10::TypeKind::SymFloatType, Arg::Kind::Double, [](const Arg& a) { return c10::IValue(a.d); }},
    {c10::TypeKind::SymFloatType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(static_cast<double>(a.i)); }},
    {c10::TypeKind::BoolType, Arg::Kind::Bool, [](const Arg& a) { return c10::IValue(a.b); }},
    {c10::TypeKind::SymBoolType, Arg::Kind::Bool, [](const Arg& a) { return c10::IValue(a.b); }},
    {c10::TypeKind::NumberType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(a.i); }},
    {c10::TypeKind::NumberType, Arg::Kind::Double, [](const Arg& a) { return c10::IValue(a.d); }},
    {c10::TypeKind::NumberType, Arg::Kind::Bool, [](const Arg& a) { return c10::IValue(a.b); }},
    {c10::TypeKind::StringType, Arg::Kind::String, [](const Arg& a) { return c10::IValue(a.str); }},
    {c10::TypeKind::DeviceObjType, Arg::Kind::Device, [](const Arg& a) { return c10::IValue(a.device); }},
    {c10::TypeKind::ScalarTypeType, Arg::Kind::DType, [](const Arg& a) { return c10::IValue(a.dtype); }},
    {c10::TypeKind::ScalarTypeType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(a.i); }},
    {c10::TypeKind::LayoutType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(a.i); }},
    {c10::TypeKind::MemoryFormatType, Arg::Kind::Int, [](const Arg& a) { return c10::IValue(a.i); }},
};

// One pushed stack entry of a step.
struct Operand {
  enum class Kind : uint8_t { Constant, Tensor, TensorList, OptionalTensorList, SymInt, SymInts };
  Kind kind = Kind::Constant;
  ValueId value = -1;           // Tensor
  std::vector<ValueId> values;  // TensorList / OptionalTensorList (-1 = None)
  c10::IValue constant;         // Constant
  std::vector<shapes::SizeExpr> exprs;  // SymInt (one) / SymInts: evaluated at each call
};

// The expressions of an Int or IntList argument when one of them varies with a live size symbol
// (pinned symbols already replaced by their numbers); empty when every one is a constant.
std::vector<shapes::SizeExpr> symbolic_ints(const Graph& g, const Arg& arg) {
  // (A graph specialised to one call's sizes has no symbols: its numbers are the call's.)
  if (g.symbols.empty() || arg.sym_ints.empty() || (arg.kind != Arg::Kind::Int && arg.kind != Arg::Kind::IntList)) return {};
  std::vector<shapes::SizeExpr> out;
  bool varies = false;
  for (const shapes::SizeExpr& e : arg.sym_ints) {
    out.push_back(shapes::live(g, e));
    varies = varies || !out.back().is_constant();
  }
  return varies ? out : std::vector<shapes::SizeExpr>{};
}

bool is_kind(const c10::TypePtr& t, c10::TypeKind k) { return t->kind() == k; }

// Returns the operand for `arg` at schema argument `sa`, or nullopt when the kinds do not fit.
// `backward`: the op is one of ATen's backward kernels (its name ends in _backward), whose Tensor
// arguments for inputs the forward did not have are passed undefined by ATen's own autograd (the
// efficient-attention backward's attn_bias): there None becomes an undefined tensor; anywhere else
// None for a non-optional argument is a capture bug and is rejected.
std::optional<Operand> match_argument(const Graph& g, const c10::Argument& sa, const Arg& arg, bool backward) {
  c10::TypePtr type = sa.real_type();
  bool optional = false;
  if (is_kind(type, c10::TypeKind::OptionalType)) {
    optional = true;
    type = type->castRaw<c10::OptionalType>()->getElementType();
  }
  Operand op;
  if (std::vector<shapes::SizeExpr> exprs = symbolic_ints(g, arg); !exprs.empty()) {
    const bool int_list = is_kind(type, c10::TypeKind::ListType) &&
                          (is_kind(type->castRaw<c10::ListType>()->getElementType(), c10::TypeKind::IntType) ||
                           is_kind(type->castRaw<c10::ListType>()->getElementType(), c10::TypeKind::SymIntType));
    // One int: an int, a SymInt, or a Scalar (arange's end, add's other), which an int IValue is.
    const bool one_int = is_kind(type, c10::TypeKind::IntType) || is_kind(type, c10::TypeKind::SymIntType) ||
                         is_kind(type, c10::TypeKind::NumberType);
    if (arg.kind == Arg::Kind::IntList ? !int_list : !one_int) return std::nullopt;
    op.kind = arg.kind == Arg::Kind::IntList ? Operand::Kind::SymInts : Operand::Kind::SymInt;
    op.exprs = std::move(exprs);
    return op;
  }
  if (arg.kind == Arg::Kind::None) {
    if (optional) return op;  // a default-constructed IValue is None
    if (!backward || !is_kind(type, c10::TypeKind::TensorType)) return std::nullopt;
    op.constant = c10::IValue(at::Tensor());
    return op;
  }
  if (is_kind(type, c10::TypeKind::TensorType)) {
    if (arg.kind != Arg::Kind::Value) return std::nullopt;
    op.kind = Operand::Kind::Tensor;
    op.value = arg.value;
    return op;
  }
  if (is_kind(type, c10::TypeKind::ListType)) {
    c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
    if ((is_kind(elem, c10::TypeKind::IntType) || is_kind(elem, c10::TypeKind::SymIntType)) &&
        arg.kind == Arg::Kind::IntList) {
      op.constant = c10::IValue(arg.ints);
      return op;
    }
    if (is_kind(elem, c10::TypeKind::BoolType) && arg.kind == Arg::Kind::IntList) {  // bool[3] output_mask
      c10::List<bool> bools;
      for (int64_t i : arg.ints) bools.push_back(i != 0);
      op.constant = c10::IValue(std::move(bools));
      return op;
    }
    if (arg.kind != Arg::Kind::ValueList) return std::nullopt;
    bool has_none = std::find(arg.values.begin(), arg.values.end(), -1) != arg.values.end();
    if (is_kind(elem, c10::TypeKind::TensorType) && !has_none) {
      op.kind = Operand::Kind::TensorList;
    } else if (is_kind(elem, c10::TypeKind::OptionalType) &&
               is_kind(elem->castRaw<c10::OptionalType>()->getElementType(), c10::TypeKind::TensorType)) {
      op.kind = Operand::Kind::OptionalTensorList;
    } else {
      return std::nullopt;
    }
    op.values = arg.values;
    return op;
  }
  for (const Conversion& c : kConversions) {
    if (c.type == type->kind() && c.arg == arg.kind) {
      op.constant = c.convert(arg);
      return op;
    }
  }
  return std::nullopt;
}

// ---- unboxed fast path ----------------------------------------------------------------------
// Most graph nodes are functional ops whose arguments are tensors and Scalars (add.Tensor,
// mul.Scalar, relu...). For those a typed (unboxed) call skips the IValue stack and the boxing
// adapter, which measured ~0.3-0.5 us per op on small tensors. Everything else stays boxed.
using SigT = at::Tensor(const at::Tensor&);
using SigTT = at::Tensor(const at::Tensor&, const at::Tensor&);
using SigTS = at::Tensor(const at::Tensor&, const c10::Scalar&);
using SigTTS = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::Scalar&);
using SigTSS = at::Tensor(const at::Tensor&, const c10::Scalar&, const c10::Scalar&);
using TypedCall = std::variant<std::monostate, c10::TypedOperatorHandle<SigT>, c10::TypedOperatorHandle<SigTT>,
                               c10::TypedOperatorHandle<SigTS>, c10::TypedOperatorHandle<SigTTS>,
                               c10::TypedOperatorHandle<SigTSS>>;

// ---- the program --------------------------------------------------------------------------

struct Step {
  explicit Step(c10::OperatorHandle handle) : op(std::move(handle)) {}
  c10::OperatorHandle op;
  std::vector<Operand> operands;
  // Returns in schema order: how many node outputs each takes (1 for Tensor/Tensor?; a Tensor[]
  // return takes the rest).
  std::vector<int32_t> return_widths;
  std::vector<bool> return_is_list;
  std::vector<ValueId> outputs;
  std::vector<ValueId> release;  // values whose last use is this step
  size_t node_index = 0;
  int8_t grad_mode = -1;            // the node's (Node::grad_mode)
  TypedCall typed;                  // set when the unboxed fast path applies
  std::vector<c10::Scalar> scalars; // the fast path's Scalar operands, in order
};

class AtenExecutable final : public runtime::Executable {
 public:
  AtenExecutable(Graph g, std::vector<Step> steps, size_t max_stack)
      : graph_(std::move(g)), steps_(std::move(steps)), max_stack_(max_stack), first_input_write_(first_input_write(graph_)) {
    bool symbolic = false;
    for (const Step& s : steps_)
      for (const Operand& o : s.operands) symbolic = symbolic || !o.exprs.empty();
    if (!symbolic) return;
    hints_ = shapes::hints(graph_);
    for (size_t k = 0; k < graph_.symbols.size(); ++k)
      if (shapes::is_live(graph_, static_cast<shapes::SymbolId>(k))) live_symbols_.push_back(k);
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    if (inputs.size() != graph_.inputs.size())
      throw UserError("aten backend: graph takes " + std::to_string(graph_.inputs.size()) + " inputs, got " +
                      std::to_string(inputs.size()));
    std::vector<at::Tensor> table(graph_.values.size());
    for (size_t i = 0; i < inputs.size(); ++i) table[static_cast<size_t>(graph_.inputs[i])] = inputs[i];
    std::vector<int64_t> sizes;  // the call's value of each size symbol (a symbolic graph's)
    if (!live_symbols_.empty()) {
      sizes = hints_;
      for (size_t k : live_symbols_) {
        const SymbolSource& src = graph_.symbols[k];
        sizes[k] = inputs.at(static_cast<size_t>(src.input)).size(src.dim);
      }
    }

    torch::jit::Stack stack;
    stack.reserve(max_stack_);
    size_t node = 0;
    try {
      for (const Step& s : steps_) {
        node = s.node_index;
        // A node of a grad-mode block inside the frame runs in that block's mode (Node::grad_mode).
        std::optional<at::AutoGradMode> block_mode;
        if (s.grad_mode >= 0) block_mode.emplace(s.grad_mode == 1);
        if (s.typed.index() != 0) {
          table[static_cast<size_t>(s.outputs[0])] = call_typed(s, table);
        } else {
          push_operands(s, table, sizes, stack);
          s.op.callBoxed(stack);
          take_returns(s, table, stack);
          stack.clear();
        }
        for (ValueId v : s.release) table[static_cast<size_t>(v)].reset();
      }
    } catch (...) {
      // Failed before its first write into an input: the hook may redo the frame eagerly
      // (runtime/graph_calls.h), as after a compiled program that failed before its write-backs.
      if (node < first_input_write_ && runtime::redo_if_untouched_expected()) runtime::note_failed_untouched();
      throw;
    }

    std::vector<at::Tensor> outputs;
    outputs.reserve(graph_.outputs.size());
    for (ValueId v : graph_.outputs) outputs.push_back(table[static_cast<size_t>(v)]);
    return outputs;
  }

  std::string describe() const override { return "backend aten\n" + print_graph(graph_); }

 private:
  static at::Tensor call_typed(const Step& s, const std::vector<at::Tensor>& table) {
    auto t = [&](size_t i) -> const at::Tensor& { return table[static_cast<size_t>(s.operands[i].value)]; };
    switch (s.typed.index()) {
      case 1: return std::get<1>(s.typed).call(t(0));
      case 2: return std::get<2>(s.typed).call(t(0), t(1));
      case 3: return std::get<3>(s.typed).call(t(0), s.scalars[0]);
      case 4: return std::get<4>(s.typed).call(t(0), t(1), s.scalars[0]);
      case 5: return std::get<5>(s.typed).call(t(0), s.scalars[0], s.scalars[1]);
    }
    throw InternalError("aten backend: bad typed call");
  }

  void push_operands(const Step& s, const std::vector<at::Tensor>& table, const std::vector<int64_t>& sizes,
                     torch::jit::Stack& stack) const {
    auto value = [&](const shapes::SizeExpr& e) {
      std::optional<int64_t> v = e.evaluate(sizes);
      if (!v) throw InternalError("aten backend: " + print_node(graph_, graph_.nodes[s.node_index]) + ": " + e.str() +
                                  " cannot be evaluated at this call's sizes");
      return *v;
    };
    for (const Operand& o : s.operands) {
      switch (o.kind) {
        case Operand::Kind::Constant: stack.push_back(o.constant); break;
        case Operand::Kind::SymInt: stack.emplace_back(value(o.exprs[0])); break;
        case Operand::Kind::SymInts: {
          std::vector<int64_t> ints;
          ints.reserve(o.exprs.size());
          for (const shapes::SizeExpr& e : o.exprs) ints.push_back(value(e));
          stack.emplace_back(std::move(ints));
          break;
        }
        case Operand::Kind::Tensor: stack.emplace_back(table[static_cast<size_t>(o.value)]); break;
        case Operand::Kind::TensorList: {
          c10::List<at::Tensor> list;
          list.reserve(o.values.size());
          for (ValueId v : o.values) list.push_back(table[static_cast<size_t>(v)]);
          stack.emplace_back(std::move(list));
          break;
        }
        case Operand::Kind::OptionalTensorList: {
          c10::List<std::optional<at::Tensor>> list;
          list.reserve(o.values.size());
          for (ValueId v : o.values)
            list.push_back(v < 0 ? std::optional<at::Tensor>() : std::optional<at::Tensor>(table[static_cast<size_t>(v)]));
          stack.emplace_back(std::move(list));
          break;
        }
      }
    }
  }

  void take_returns(const Step& s, std::vector<at::Tensor>& table, torch::jit::Stack& stack) const {
    size_t out = 0;
    for (size_t r = 0; r < s.return_widths.size(); ++r) {
      c10::IValue& ret = stack[r];
      if (!s.return_is_list[r]) {
        // Tensor? returns come back as None: the value stays an undefined tensor.
        if (!ret.isNone()) table[static_cast<size_t>(s.outputs[out])] = std::move(ret).toTensor();
        ++out;
        continue;
      }
      c10::List<at::Tensor> list = std::move(ret).toTensorList();
      if (list.size() != static_cast<size_t>(s.return_widths[r]))
        throw BackendError("aten backend: " + print_node(graph_, graph_.nodes[s.node_index]) + " returned " +
                           std::to_string(list.size()) + " tensors where the graph expects " +
                           std::to_string(s.return_widths[r]));
      for (size_t k = 0; k < list.size(); ++k) table[static_cast<size_t>(s.outputs[out++])] = list.get(k);
    }
  }

  Graph graph_;
  std::vector<Step> steps_;
  size_t max_stack_;
  size_t first_input_write_;  // the first node writing an input's storage (graph_.nodes.size(): none)
  // A symbolic graph's: the live symbols' ids (empty: no operand varies with a size), and the
  // traced values of all of them (the pinned ones' numbers).
  std::vector<size_t> live_symbols_;
  std::vector<int64_t> hints_;
};

// ---- compilation --------------------------------------------------------------------------

class Compiler {
 public:
  explicit Compiler(const Graph& g) : g_(g), defined_(g.values.size(), false), last_use_(g.values.size(), -1) {}

  runtime::ExecutablePtr compile() {
    for (ValueId v : g_.inputs) define(v, "graph input");
    std::vector<Step> steps;
    steps.reserve(g_.nodes.size());
    size_t max_stack = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      steps.push_back(compile_node(i));
      max_stack = std::max({max_stack, steps.back().operands.size(), steps.back().return_widths.size()});
    }
    std::vector<bool> is_output(g_.values.size(), false);
    for (ValueId v : g_.outputs) {
      check_defined(v, "graph output");
      is_output[static_cast<size_t>(v)] = true;
    }
    // Free each intermediate right after its last reader (or its producer, if nothing reads it).
    for (size_t v = 0; v < g_.values.size(); ++v)
      if (!is_output[v] && last_use_[v] >= 0) steps[static_cast<size_t>(last_use_[v])].release.push_back(static_cast<ValueId>(v));
    return std::make_shared<AtenExecutable>(g_, std::move(steps), max_stack);
  }

 private:
  [[noreturn]] void fail(size_t node, const std::string& why) const {
    throw InternalError("aten backend: node '" + print_node(g_, g_.nodes[node]) + "': " + why);
  }

  bool in_range(ValueId v) const { return v >= 0 && static_cast<size_t>(v) < g_.values.size(); }

  void define(ValueId v, const char* what) {
    FD_CHECK(in_range(v), std::string("aten backend: ") + what + " %" + std::to_string(v) + " is out of range");
    FD_CHECK(!defined_[static_cast<size_t>(v)], std::string("aten backend: ") + what + " %" + std::to_string(v) + " is defined twice");
    defined_[static_cast<size_t>(v)] = true;
  }
  void check_defined(ValueId v, const char* what) const {
    FD_CHECK(in_range(v) && defined_[static_cast<size_t>(v)],
             std::string("aten backend: ") + what + " %" + std::to_string(v) + " is not defined");
  }
  void use(size_t node, ValueId v) {
    if (!in_range(v) || !defined_[static_cast<size_t>(v)]) fail(node, "uses %" + std::to_string(v) + " before it is defined");
    last_use_[static_cast<size_t>(v)] = static_cast<int64_t>(node);
  }

  c10::OperatorHandle find_operator(size_t index) const {
    const OpInfo& info = op_info(g_.nodes[index].op);
    try {
      return c10::Dispatcher::singleton().findSchemaOrThrow((std::string("aten::") + info.aten).c_str(), info.overload);
    } catch (const c10::Error&) {
      fail(index, "ATen has no operator " + qualified_name(g_.nodes[index].op));
    }
  }

  Step compile_node(size_t index) {
    const Node& n = g_.nodes[index];
    Step s(find_operator(index));
    s.node_index = index;
    s.grad_mode = n.grad_mode;
    const c10::FunctionSchema& schema = s.op.schema();
    const auto& params = schema.arguments();
    if (n.args.size() > params.size())
      fail(index, "has " + std::to_string(n.args.size()) + " arguments, the schema '" + c10::toString(schema) + "' takes " +
                      std::to_string(params.size()));

    s.operands.reserve(params.size());
    const std::string& name = schema.name();
    const std::string suffix = "_backward";
    const bool backward = name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    for (size_t a = 0; a < params.size(); ++a) {
      const c10::Argument& sa = params[a];
      if (a >= n.args.size()) {
        // Trailing arguments left out take the schema's defaults.
        if (!sa.default_value())
          fail(index, "argument " + std::to_string(a) + " ('" + sa.name() + "') is missing and has no default in '" +
                          c10::toString(schema) + "'");
        Operand o;
        o.constant = *sa.default_value();
        s.operands.push_back(std::move(o));
        continue;
      }
      std::optional<Operand> o = match_argument(g_, sa, n.args[a], backward);
      if (!o)
        fail(index, "argument " + std::to_string(a) + " ('" + sa.name() + "': " + sa.real_type()->str() + ") got " +
                        arg_kind_name(n.args[a].kind));
      if (o->kind == Operand::Kind::Tensor) use(index, o->value);
      for (ValueId v : o->values)
        if (v >= 0) use(index, v);
      s.operands.push_back(std::move(*o));
    }

    unpack_returns(index, schema, s);
    choose_typed_call(s);
    for (ValueId v : n.outputs) {
      if (!in_range(v) || defined_[static_cast<size_t>(v)]) fail(index, "output %" + std::to_string(v) + " is out of range or defined twice");
      defined_[static_cast<size_t>(v)] = true;
      last_use_[static_cast<size_t>(v)] = static_cast<int64_t>(index);  // unread outputs die at once
    }
    s.outputs = n.outputs;
    return s;
  }

  // Picks the unboxed fast path when the schema is (Tensor|Scalar)... -> Tensor and functional.
  static void choose_typed_call(Step& s) {
    const c10::FunctionSchema& schema = s.op.schema();
    if (schema.is_mutable() || schema.returns().size() != 1 || s.outputs.size() != 1 ||
        schema.returns()[0].real_type()->kind() != c10::TypeKind::TensorType)
      return;
    std::string pattern;
    for (size_t a = 0; a < schema.arguments().size(); ++a) {
      const c10::TypeKind k = schema.arguments()[a].real_type()->kind();
      const Operand& o = s.operands[a];
      if (k == c10::TypeKind::TensorType && o.kind == Operand::Kind::Tensor) {
        pattern += 'T';
      } else if (k == c10::TypeKind::NumberType && o.kind == Operand::Kind::Constant && o.constant.isScalar()) {
        pattern += 'S';
        s.scalars.push_back(o.constant.toScalar());
      } else {
        s.scalars.clear();
        return;
      }
    }
    try {
      if (pattern == "T") s.typed = s.op.typed<SigT>();
      else if (pattern == "TT") s.typed = s.op.typed<SigTT>();
      else if (pattern == "TS") s.typed = s.op.typed<SigTS>();
      else if (pattern == "TTS") s.typed = s.op.typed<SigTTS>();
      else if (pattern == "TSS") s.typed = s.op.typed<SigTSS>();
    } catch (const c10::Error&) {
      s.typed = std::monostate();  // the kernel's C++ signature differs: stay boxed
    }
    if (s.typed.index() == 0) s.scalars.clear();
  }

  // Tensor and Tensor? returns take one output each; at most one Tensor[] return takes the rest.
  void unpack_returns(size_t index, const c10::FunctionSchema& schema, Step& s) {
    const Node& n = g_.nodes[index];
    int32_t fixed = 0;
    int list_returns = 0;
    for (const c10::Argument& r : schema.returns()) {
      c10::TypePtr t = r.type();
      if (is_kind(t, c10::TypeKind::OptionalType)) t = t->castRaw<c10::OptionalType>()->getElementType();
      bool is_tensor = is_kind(t, c10::TypeKind::TensorType);
      bool is_list = is_kind(t, c10::TypeKind::ListType) &&
                     is_kind(t->castRaw<c10::ListType>()->getElementType(), c10::TypeKind::TensorType);
      if (!is_tensor && !is_list) fail(index, "returns a non-tensor " + r.type()->str() + ", which a graph cannot hold");
      s.return_is_list.push_back(is_list);
      s.return_widths.push_back(is_list ? 0 : 1);
      fixed += is_list ? 0 : 1;
      list_returns += is_list ? 1 : 0;
    }
    auto outs = static_cast<int32_t>(n.outputs.size());
    bool fits = list_returns == 0 ? outs == fixed : (list_returns == 1 && outs >= fixed);
    if (!fits)
      fail(index, "has " + std::to_string(outs) + " outputs, the schema '" + c10::toString(schema) + "' returns " +
                      (list_returns ? "a tensor list" : std::to_string(fixed) + " tensors"));
    for (size_t r = 0; r < s.return_is_list.size(); ++r)
      if (s.return_is_list[r]) s.return_widths[r] = outs - fixed;
  }

  const Graph& g_;
  std::vector<bool> defined_;
  std::vector<int64_t> last_use_;
};

}  // namespace

runtime::ExecutablePtr compile_aten(const Graph& g) { return Compiler(g).compile(); }

}  // namespace fastdyn::codegen
