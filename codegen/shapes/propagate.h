// codegen/shapes/propagate.h — sizes as symbols through a recorded graph.
//
// A graph input's dim becomes a size symbol (s<k>, Graph::symbols) when the tracer is told it
// varies (automatic dynamic, mark_dynamic, jit(dynamic=True)). From there, every node that
// capture records gets symbolic output sizes and strides (TensorMeta::sym_sizes/sym_strides) from
// a rule chosen by ops.def's Rule column, next to the concrete sizes that capture's meta rules
// computed for the traced call (the hints). Each rule's result is checked against those hints:
// a rule that disagrees is a compiler bug (InternalError), never a silent guess.
//
// Where a rule cannot keep a size symbolic — an op without a symbolic rule, a view whose shape is
// a constant, two different symbols that an op requires equal, a normalized_shape given as
// numbers — the symbols it touches are pinned: replaced by their hints everywhere in the graph,
// so that the graph is exactly today's static graph along those dims and the guards check them
// exactly (SymbolSource::pinned). Pinning is always safe; keeping a symbol is what rules earn.
// The tracer pins too, wherever Python code reads a size as a number (returns it, indexes a
// list with it); a comparison of sizes instead leaves a relation for the guards (interpreter.h's
// TraceResult::size_relations). Where an op needs two sizes equal and both are live symbols of
// one hint, they are unified rather than pinned (unify(): one symbol; the guards check the two
// input dims equal).
//
// Backends compile a symbolic graph through specialize(): the graph at the sizes of a call.
#pragma once
#include "codegen/capture/capture.h"
#include "codegen/graph/graph.h"

#include <cstdint>
#include <vector>

namespace fastdyn::codegen::shapes {

// The symbolic sizes/strides of a value: its sym_* when symbolic, else its constants.
std::vector<SizeExpr> sizes_of(const TensorMeta& m);
std::vector<SizeExpr> strides_of(const TensorMeta& m);
// The product of `sizes`: a tensor's element count.
SizeExpr numel_of(const std::vector<SizeExpr>& sizes);
// Row-major strides of `sizes` (the layout of a contiguous tensor).
std::vector<SizeExpr> contiguous_strides(const std::vector<SizeExpr>& sizes);

// Gives dim `dim` of graph input number `input` (an index into g.inputs) a fresh symbol, unless
// its size is 0 or 1 (those stay specialised: broadcasting depends on them) or the input is not
// contiguous. Returns whether it did.
bool make_dynamic(Graph& g, size_t input, int64_t dim);

// Symbolic metadata for the outputs of nodes [first_node, end), pinning what the rules cannot
// keep symbolic. Throws InternalError when a rule's result disagrees with the traced sizes.
void propagate(Graph& g, size_t first_node);

// Specialises symbol s (or every symbol in value v's sizes, or in its dim `dim` when dim >= 0):
// the hint replaces it everywhere; values left with constant sizes only become static again.
// `why` says what needed the number (kept for the first pin of each symbol).
void pin(Graph& g, SymbolId s, const std::string& why = "");
void pin_value(Graph& g, ValueId v, int64_t dim = -1, const std::string& why = "");
// Makes two live symbols of equal hints one (the later becomes the earlier everywhere; its
// SymbolSource::same_as says so): where an op needs two sizes equal, the graph keeps one symbol
// and the guards check the two input dims equal, instead of specialising both.
void unify(Graph& g, SymbolId a, SymbolId b);
// The symbol s stands for: itself, or the symbol it was unified with.
SymbolId root(const Graph& g, SymbolId s);
// "L['x'] dim 1 (s0): <why>" for every pinned symbol whose input is named in `input_names`.
std::vector<std::string> describe_pins(const Graph& g, const std::vector<std::string>& input_names);

// e with every pinned symbol replaced by its hint.
SizeExpr live(const Graph& g, const SizeExpr& e);
// An IntList argument's expressions: its sym_ints (pinned symbols replaced) or its constants.
std::vector<SizeExpr> ints_of(const Graph& g, const Arg& a);
// The families whose binders take symbolic ints (CallArg::sym) and record them in their nodes
// (Arg::sym_ints); record_call specialises the symbolic ints passed to any other family.
bool takes_symbolic_ints(Family f);
// Specialises every symbolic int in the call's arguments (and drops their expressions).
void pin_call_args(Graph& g, std::vector<CallArg>& args, std::vector<std::pair<std::string, CallArg>>& kwargs,
                   const std::string& why);

// Whether symbol s is live: neither pinned nor unified into another (it has its own value).
bool is_live(const Graph& g, SymbolId s);
// Whether some symbol of g is still live (neither pinned nor unified into another): the graph
// compiles once for every size.
bool is_dynamic(const Graph& g);
// The traced call's value of every symbol (pinned ones too), by symbol id.
std::vector<int64_t> hints(const Graph& g);
// g at the sizes `binding` (one value per symbol, by id): every meta's numbers are the call's, and
// it keeps its expressions (Graph::binding says over which values); the graph has no symbols. The
// binding must satisfy the guards (sizes >= 2 for live symbols); values are checked for
// overflow, and a meta that cannot be evaluated throws InternalError.
Graph specialize(const Graph& g, const std::vector<int64_t>& binding);

}  // namespace fastdyn::codegen::shapes
