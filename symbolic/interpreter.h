// symbolic/interpreter.h — the symbolic interpreter: traces one frame's bytecode into a graph.
//
// Algorithm. Starting at the first instruction with the frame's arguments as inputs, execute
// each instruction on symbolic values (values.h): Python constants are computed for real
// (folding shape arithmetic), tensor operations are recorded into a codegen::Graph through the
// op table (codegen::record_call) whose C++ rules give every output's metadata, and every value
// read from outside the frame (arguments, globals, builtins, closure cells, attributes of those)
// is recorded with a guard. Jumps on values known at trace time are taken (loops unroll),
// Python functions, methods and nn.Module calls are inlined (calls.cpp). The trace ends at the
// root's RETURN_VALUE/RETURN_CONST. Where an instruction or call cannot be traced, the result is
// a graph break: the trace is repeated up to that instruction of the root frame (for a call
// inside an inlined function, the root's call instruction), and the caller emits bytecode that
// runs the graph so far, the instruction itself, and a continuation (continuation.h). Where the
// root frame cannot break there (inside a try/with block or a loop, cell variables), the frame
// runs eagerly.
// The trace never executes user code with side effects: only side-effect-free folding of
// builtin constants and attribute reads of modules, classes and plain instance dicts.
#pragma once
#include <Python.h>

#include <map>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codegen/graph/graph.h"
#include "symbolic/dynamic_mode.h"
#include "symbolic/values.h"

namespace fastdyn::symbolic {

// What the interpreter sees of the frame; all borrowed.

// Per code object (eval_hook's CodeState): the sizes each tensor input had when a trace first
// saw it, by source name ("L['x']"), and which trace that was; the dims seen with another size
// since; and the sizes (above 1) those dims had before they varied: sizes that moved
// (conversions.cpp's dynamic_dims).
struct ShapeHistory {
  struct First {
    std::vector<int64_t> sizes;
    int trace = 0;  // 0: the code's first trace; later: an input that trace never saw
  };
  std::map<std::string, First> first;
  std::map<std::string, std::set<int64_t>> varying;
  std::set<int64_t> moved;
  int traces = 0;  // trace_frame calls so far (the current one included, while it runs)
};

struct FrameInputs {
  PyCodeObject* code = nullptr;
  PyObject* const* localsplus = nullptr;  // argument slots are valid
  PyObject* globals = nullptr;
  PyObject* builtins = nullptr;
  PyObject* closure = nullptr;            // tuple of cells or nullptr
  DynamicMode dynamic = DynamicMode::Auto;
  ShapeHistory* shapes = nullptr;         // updated by the trace; nullptr: nothing is remembered
};

// Instance: a plain object of a Python class, guarded by its type and its alias slot (distinct
// objects stay distinct, one object reached twice stays one) instead of its identity, so that
// objects made per call (a KV cache, say) hit the same entry.
// TypeAttr: what the attribute `name` of the object resolves to through its class (obj: the class
// attribute, or nullptr for none), not shadowed by the object's own.
// DictKeys: type is dict and the keys are these, in this order (obj: the dict seen).
// Lacks: a dict without the key `name` (an nn.Module's _parameters, _buffers, _modules).
enum class GuardKind : uint8_t { TypeIs, IdIs, Equals, Tensor, TypeAndLen, Instance, TypeAttr, DictKeys, Lacks, FunctionParts };

// One guard the trace relies on: `kind` of the object at `source`. It owns its reference to
// `obj`: a TraceResult moved over another (a trace redone) releases the other's (held under the GIL).
struct GuardSpec {
  SourcePtr source;
  GuardKind kind = GuardKind::TypeIs;
  PyObject* obj = nullptr;  // the object seen at trace time (strong)
  std::string name;         // TypeAttr, Lacks

  GuardSpec() = default;
  GuardSpec(const GuardSpec&) = delete;
  GuardSpec& operator=(const GuardSpec&) = delete;
  GuardSpec(GuardSpec&& o) noexcept
      : source(std::move(o.source)), kind(o.kind), obj(std::exchange(o.obj, nullptr)), name(std::move(o.name)) {}
  GuardSpec& operator=(GuardSpec&& o) noexcept {
    if (this != &o) {
      Py_XDECREF(obj);
      source = std::move(o.source);
      kind = o.kind;
      obj = std::exchange(o.obj, nullptr);
      name = std::move(o.name);
    }
    return *this;
  }
  ~GuardSpec() { Py_XDECREF(obj); }
};

struct TraceResult {
  bool ok = false;
  std::string reason;    // why the trace stopped, when !ok
  std::string filename;  // where it stopped
  int lineno = -1;

  codegen::Graph graph;
  // The grad mode where the trace ended (returned or stopped at the break), when it differs from
  // the mode it started in: only where it left a grad-mode block it did not enter (a
  // continuation resuming inside one). The transformed code then sets it for real.
  std::optional<bool> grad_mode_after;
  // The trace entered a torch.autograd.profiler.record_function block as a null context (no
  // RecordFunction observer was installed, so it recorded nothing): the entry holds while none is.
  bool no_record_function_observers = false;
  // The trace met state the program is still building (a defaultdict keyed by tensors that
  // lacks a key yet: an optimizer's first step). The frame runs as written this time, and is
  // traced again at its next call instead of running as written for good.
  bool retry_later = false;
  // A size moved (ShapeHistory) after an input first seen in this trace was read with that
  // size: trace_frame traces again once, so that input's dim is a symbol whatever the order of reads.
  bool moved_after_read = false;
  // The trace stopped at a `raise` that nothing it traced handles (symbolic/tracer.h's Raised):
  // where no graph break can come before it, the frame runs as written on this path, raising as
  // eager does. That is not a graph break (Dynamo counts none either), and the frame is traced
  // again at a later call (a validation that raises for some inputs only).
  bool raises = false;
  // Some op of the graph was recorded inside a try block with an except clause that may catch
  // the op's failure at run time (an IndexError, a RuntimeError: Tracer::inside_try_except).
  // Only a graph that can be redone eagerly when it raises keeps that (eval_hook/compiler.cpp).
  bool op_in_try = false;
  std::vector<SourcePtr> input_sources;  // graph input i is loaded from input_sources[i]
  std::vector<GuardSpec> guards;
  // Comparisons of size-derived ints the trace decided at its sizes (s0 >= 21 was false): the
  // guards check each still holds (codegen/shapes/size_expr.h's Relation, over graph.symbols).
  std::vector<codegen::shapes::Relation> size_relations;
  SymValue return_value;  // when the frame was traced to its return

  // Writes to what outlives the frame (attributes, the caller's lists and dicts, free variables,
  // globals), in program order: the transformed code performs them after the graph runs.
  struct SideEffect {
    SymValue target;
    std::string name;  // SetAttr: the attribute
    SymValue value;    // SetAttr: what is stored
    // SetAttr: target.name = value. ClearList: del target[:] (a continuation's prologue emptying
    // the list its arguments came in, continuation.h). SetContents: the list or dict the caller
    // passed as `target` (its source) gets the items its box holds at the trace's end
    // (target[:] = [...]; or clear() and update()): the trace mutated it.
    // SetCell: the frame's free variable `target` (its source the Closure index) gets `value`
    // (STORE_DEREF after the graph; DELETE_DEREF where value is NULL). SetGlobal: the frame's global `name` gets `value`
    // (STORE_GLOBAL after the graph; target unused). CallMethod: target.name(*value), value a
    // constant tuple (a mutating method of the caller's set, replayed call by call so that its
    // table evolves as eager's does; the __exit__ of a torch.autocast block entered for real).
    enum class Kind : uint8_t { SetAttr, ClearList, SetContents, SetCell, SetGlobal, CallMethod } kind = Kind::SetAttr;
    // SetContents: the keys and items the box held when the trace first mutated it (what the
    // caller's object held), so that contents the trace only put back are not rewritten.
    std::vector<SymValue> before_keys, before_items;
    // Whether the transformed code performs it: not a SetContents whose list or dict ends holding
    // what it held, key for key in the same order (torch.optim's SGD stores each momentum buffer
    // back into its state dict: a clear, an update and a dict built per parameter at every step).
    // It stays in the trace either way: the guards still keep the containers' aliasing.
    bool replayed() const;
  };
  std::vector<SideEffect> effects;

  // A graph break: the trace stopped before root instruction break_inst (the first of the
  // sequence [KW_NAMES] [PRECALL] CALL, or the one instruction that could not be traced), whose
  // last instruction is break_end; `reason`/`lineno` say why. stack and locals are the root
  // frame's symbolic state there.
  bool stopped = false;
  int break_inst = -1;
  int break_end = -1;
  std::vector<SymValue> stack;
  std::vector<std::optional<SymValue>> locals;

  TraceResult() = default;
  TraceResult(const TraceResult&) = delete;
  TraceResult& operator=(const TraceResult&) = delete;
  TraceResult(TraceResult&&) = default;
  TraceResult& operator=(TraceResult&&) = default;
};

// Traces the frame. Never throws for unsupported code (it returns !ok with the reason); may
// throw InternalError for fastdyn bugs. Leaves no Python exception set.
TraceResult trace_frame(const FrameInputs& frame);

// Readable source path: "L['x']", "G['torch'].relu".
std::string source_name(const Source& s);

}  // namespace fastdyn::symbolic
