// codegen/graph/graph.h — the tensor-graph IR: the contract between symbolic/ (which records it) and
// the backends (which compile it).
//
// A Graph is a list of nodes in execution order. Every node is one ATen operator overload (an
// OpId row of codegen/graph/ops.def) applied to arguments given in the ATen schema's order, so a
// backend can call the operator without re-normalising. Values are tensors only; non-tensor
// arguments are constants inside the node. Each value carries the metadata its producer's rule
// computed (dtype, device, sizes, strides) so passes never run ATen to learn shapes.
// Text form (print_graph / parse_graph, graph_text.cpp) exists for golden tests and dumps.
// NB: no ATen headers here — only c10's small ScalarType/Device — so this header stays cheap.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "codegen/shapes/size_expr.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fastdyn::codegen {

enum class OpCategory : uint8_t { Pointwise, Reduction, View, Extern, InPlace, Factory, Random };
// ops.def's Lower column: how the loop IR computes the op (ops.def says what each means).
#define FD_LOWERINGS(X) X(Pointwise) X(Kernel) X(View) X(Twin) X(Extern) X(Unlowered)
enum class Lowering : uint8_t {
#define FD_LOWERING(name) name,
  FD_LOWERINGS(FD_LOWERING)
#undef FD_LOWERING
};

// ops.def's Dtype column: how an op's result dtype follows from its operands' (ops.def says what
// each means; codegen/capture/meta_rules.h `result_dtype` applies it).
#define FD_DTYPE_RULES(X)                                                                          \
  X(Promote) X(IntToFloat) X(ToBool) X(NoBool) X(FloatOnly) X(Integral) X(IntNoBool) X(BoolToLong) \
  X(IntToLong) X(FloatOut) X(AllAny) X(ToLong) X(ArgIndex) X(Own)
enum class DtypeRule : uint8_t {
#define FD_DTYPE_RULE(name) name,
  FD_DTYPE_RULES(FD_DTYPE_RULE)
#undef FD_DTYPE_RULE
};

enum class OpId : uint16_t {
#define FD_OP(id, aten, overload, category, rule, dtype, twin, lower) id,
#include "codegen/graph/ops.def"
  kCount,
  NoTwin = kCount  // ops.def's Twin column: no out-of-place form
};

struct OpInfo {
  const char* id;        // "add_Tensor"
  const char* aten;      // "add"
  const char* overload;  // "Tensor" ("" = default overload)
  OpCategory category;
  OpId twin;             // InPlace: the out-of-place op computing what it writes; else NoTwin
  const char* rule;      // ops.def's Rule column: "Binary", "Reduce", ... (codegen/shapes/propagate.cpp)
  DtypeRule dtype;       // ops.def's Dtype column
  Lowering lowering;     // ops.def's Lower column (codegen/loop/lowering.cpp dispatches on it)
};
const char* lowering_name(Lowering l);  // "Pointwise"
const char* dtype_rule_name(DtypeRule r);  // "IntToFloat"
const OpInfo& op_info(OpId op);
// Looks an op up by "aten::name.overload" (or "aten::name" for the default overload).
std::optional<OpId> op_by_qualified_name(std::string_view qualified);
std::string qualified_name(OpId op);  // "aten::add.Tensor"

using ValueId = int32_t;

struct TensorMeta {
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  bool requires_grad = false;
  // Sizes as symbols (codegen/shapes/propagate.h): empty for a value whose shape is static;
  // otherwise one expression per dim, over the graph's size symbols, and the strides they give.
  // `sizes`/`strides` then hold their values for the call that was traced (the hints).
  std::vector<shapes::SizeExpr> sym_sizes;
  std::vector<shapes::SizeExpr> sym_strides;
  // A view's storage offset over size symbols (x[:, -1:] of a [b, s0] tensor: s0 - 1), set only
  // when it is not a number, and then with sym_sizes/sym_strides set too (possibly constants).
  std::vector<shapes::SizeExpr> sym_offset;  // empty, or one expression

  bool symbolic() const { return !sym_sizes.empty(); }
  // Dim d's size and stride, and the storage offset, over size symbols: the expression where the
  // meta has one, else the number.
  shapes::SizeExpr size_expr(size_t d) const { return symbolic() ? sym_sizes.at(d) : shapes::SizeExpr(sizes.at(d)); }
  shapes::SizeExpr stride_expr(size_t d) const { return symbolic() ? sym_strides.at(d) : shapes::SizeExpr(strides.at(d)); }
  shapes::SizeExpr offset_expr() const { return sym_offset.empty() ? shapes::SizeExpr(storage_offset) : sym_offset[0]; }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t numel() const;
  int64_t nbytes() const;  // numel() * the dtype's element size
  bool operator==(const TensorMeta& o) const;
};

// One argument of a node, in ATen schema order. `Scalar` schema arguments are Int/Double/Bool.
struct Arg {
  enum class Kind : uint8_t {
    Value,      // a tensor value (value)
    ValueList,  // Tensor[] (values), e.g. cat; in a Tensor?[] (index.Tensor) -1 stands for None
    None,       // an optional argument left out
    Int,        // i
    Double,     // d
    Bool,       // b
    IntList,    // ints, e.g. sizes, dims
    DType,      // dtype
    Device,     // device
    String,     // str, e.g. gelu's approximate="tanh"
  };
  Kind kind = Kind::None;
  ValueId value = -1;
  std::vector<ValueId> values;
  int64_t i = 0;
  double d = 0.0;
  bool b = false;
  std::vector<int64_t> ints;
  std::vector<shapes::SizeExpr> sym_ints;  // IntList: each int's expression over size symbols;
                                           // Int: one, for `i` (empty: constant; ints/i hold
                                           // the traced call's values)
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  std::string str;

  static Arg of_value(ValueId v) { Arg a; a.kind = Kind::Value; a.value = v; return a; }
  static Arg of_values(std::vector<ValueId> v) { Arg a; a.kind = Kind::ValueList; a.values = std::move(v); return a; }
  static Arg none() { return Arg(); }
  static Arg of_int(int64_t v) { Arg a; a.kind = Kind::Int; a.i = v; return a; }
  static Arg of_double(double v) { Arg a; a.kind = Kind::Double; a.d = v; return a; }
  static Arg of_bool(bool v) { Arg a; a.kind = Kind::Bool; a.b = v; return a; }
  static Arg of_ints(std::vector<int64_t> v) { Arg a; a.kind = Kind::IntList; a.ints = std::move(v); return a; }
  static Arg of_dtype(c10::ScalarType t) { Arg a; a.kind = Kind::DType; a.dtype = t; return a; }
  static Arg of_device(c10::Device dev) { Arg a; a.kind = Kind::Device; a.device = dev; return a; }
  static Arg of_string(std::string s) { Arg a; a.kind = Kind::String; a.str = std::move(s); return a; }
  bool operator==(const Arg& o) const;
  // An Int, Double or Bool argument as a double; nullopt for any other kind.
  std::optional<double> number() const {
    switch (kind) {
      case Kind::Int: return static_cast<double>(i);
      case Kind::Double: return d;
      case Kind::Bool: return b ? 1.0 : 0.0;
      default: return std::nullopt;
    }
  }
};

struct Node {
  OpId op;
  std::vector<Arg> args;         // ATen schema order, every positional and keyword argument
  std::vector<ValueId> outputs;  // a Tensor[] return expands to one value per element
  // The Python line that recorded it (source_location.h), -1 unknown. Set only while the
  // report's journal is on; passes that copy a node carry it, so kernels know their lines.
  int32_t loc = -1;
  // The grad mode of the block it was recorded in, where that differs from the graph's caller's
  // (a torch.no_grad() block inside a frame that tracks gradients): 0 off, 1 on, -1 the caller's.
  // The aten backend runs it so, where autograd records what runs (loop backends record nothing).
  int8_t grad_mode = -1;
};

// Where a size symbol comes from: dim `dim` of graph input number `input` (an index into
// Graph::inputs). Symbol s<k> is Graph::symbols[k]. A pinned symbol was specialised by the trace
// (something read its value, or an op without a symbolic rule used it): it is its hint again
// everywhere, and guards check that dim exactly.
struct SymbolSource {
  int32_t input = -1;
  int32_t dim = -1;
  bool pinned = false;
  std::string why;  // what pinned it, for FASTDYN_LOG=recompiles ("aten::arange takes it as a number")
  // Unified with an earlier symbol (an op needed the two sizes equal, and they were): it is that
  // symbol everywhere, and guards check the two dims equal. -1: its own symbol.
  int32_t same_as = -1;
  bool operator==(const SymbolSource& o) const {
    return input == o.input && dim == o.dim && pinned == o.pinned && same_as == o.same_as;
  }
};

struct Graph {
  std::vector<TensorMeta> values;  // indexed by ValueId
  std::vector<ValueId> inputs;     // graph inputs, in calling order
  std::vector<Node> nodes;         // execution order
  std::vector<ValueId> outputs;    // may repeat values or name inputs
  std::vector<SymbolSource> symbols;           // size symbols (empty: every shape is static)
  // A graph specialised to one call's sizes (shapes::specialize): the value of every size symbol
  // of the symbolic graph it came from, by id. Its metas keep their sym_* expressions over those
  // symbols next to the numbers, so that a backend can compile code that reads a size at run
  // time instead of baking it in (an expression is used only where it evaluates, at `binding`,
  // to the number: a pass that copied a meta and changed its sizes leaves a stale expression,
  // which then is ignored). Empty for a graph that was never symbolic.
  std::vector<int64_t> binding;

  ValueId add_value(TensorMeta meta) {
    values.push_back(std::move(meta));
    return static_cast<ValueId>(values.size() - 1);
  }
  // A node computing op over args appended, with one output of `meta`; returns that output.
  ValueId add_node(OpId op, std::vector<Arg> args, TensorMeta meta) {
    Node n;
    n.op = op;
    n.args = std::move(args);
    n.outputs = {add_value(std::move(meta))};
    nodes.push_back(std::move(n));
    return nodes.back().outputs[0];
  }
  ValueId add_input(TensorMeta meta) {
    ValueId v = add_value(std::move(meta));
    inputs.push_back(v);
    return v;
  }
  const TensorMeta& meta(ValueId v) const { return values.at(static_cast<size_t>(v)); }
};

// Text form, one line per node, e.g.
//   graph(%0: f32[4, 8]{8, 1}, %1: f32[8]{1}):
//     %2: f32[4, 8]{8, 1} = aten::add.Tensor(%0, %1, 1)
//     return (%2)
// parse_graph(print_graph(g)) == g for every graph. parse_graph throws UserError naming the line.
// f(v) for every tensor value node `n` reads, in argument order (a Tensor[]'s elements included,
// its None entries not; a value read twice is visited twice).
template <class F>
void for_each_value_input(const Node& n, F&& f) {
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::Value) f(a.value);
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId v : a.values)
        if (v >= 0) f(v);
  }
}
// The same, with each read as a reference that f may rename (a pass rewiring a node's inputs).
template <class F>
void for_each_value_input_ref(Node& n, F&& f) {
  for (Arg& a : n.args) {
    if (a.kind == Arg::Kind::Value) f(a.value);
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId& v : a.values)
        if (v >= 0) f(v);
  }
}

// Whether `g` was traced outside grad mode although some inputs require grad: an op that computes
// (not a view) took such an input and gave a floating output that does not require grad. Views of
// those inputs then still require grad (eager: `param.expand(...)` under no_grad), but nothing
// records a backward for them. Or: every node was recorded with grad mode off (Node::grad_mode 0).
bool traced_without_grad(const Graph& g);

// Whether an in-place op of `g` writes the storage of a graph input: its `self` reaches an input
// through views and earlier in-place results. (An in-place op on a value the graph made writes
// nothing the caller can see.)
bool writes_an_input(const Graph& g);
// The index of the first such node, or g.nodes.size() when none writes an input.
size_t first_input_write(const Graph& g);

std::string print_graph(const Graph& g);
Graph parse_graph(std::string_view text);
// One node's line without indentation ("%2: f32[4]{1} = aten::relu(%1)"), for error messages.
std::string print_node(const Graph& g, const Node& n);
bool operator==(const Graph& a, const Graph& b);

}  // namespace fastdyn::codegen
