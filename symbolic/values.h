// symbolic/values.h — what the symbolic interpreter keeps on its stack and in its locals.
//
// A SymValue is either known at trace time (a Python constant: ints, tuples, torch.Size, dtypes,
// modules, functions...), a tensor of the graph being recorded, a container built during the
// trace (tuple, list, dict), an iterator over known items, a function or cell made during the
// trace, a method bound to a tensor or object, or the NULL the 3.11/3.12 call protocol pushes.
// Values that came from outside the frame remember their Source so guards can be built and the
// transformed code can load them again.
// Mutable things (lists, dicts, iterators, cells) keep their state in a shared SymBox, so that
// two names for one list see the same appends, as in Python.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "codegen/capture/capture.h"
#include "codegen/graph/graph.h"

namespace fastdyn::symbolic {

// Where a value read by the trace lives, relative to the frame.
struct Source {
  // Const: a fixed object (an inlined function's globals dict, a closure cell), held strongly.
  enum class Kind : uint8_t { Local, Global, Builtin, Closure, Attr, Item, DictItem, Const };
  Kind kind = Kind::Local;
  int index = 0;                   // Local slot, Closure index, Item index
  std::string name;                // Global/Builtin/Attr name, DictItem key (its repr for
                                   // another key); the Local's name
  std::shared_ptr<Source> parent;  // Attr/Item/DictItem
  PyObject* object = nullptr;      // Const; DictItem: a key other than a str (strong)

  Source() = default;
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;
  ~Source() { Py_XDECREF(object); }
};
using SourcePtr = std::shared_ptr<Source>;

// A path's identity: two Sources with the same steps from the same root have the same key (a
// tensor key held weakly: by its referent).
std::string source_key(const Source& s);

struct SymBox;
struct SymValue;

// A size-derived int (x.shape[0] where that dim is a size symbol, and arithmetic on such ints)
// is a Constant holding the traced call's value, tagged with its expression (SymValue::size).
// Ops that understand sizes (tensor calls whose binders take symbolic ints, int arithmetic,
// tuples holding it) keep the expression; any other use reads the number, and reading it
// specialises the size: is_constant() and is_python_constant() call the hook below, which pins
// the symbols (codegen/shapes/propagate.h). Set by the tracer for its thread while it runs.
struct SizeReadHook {
  void (*fn)(void* ctx, const codegen::shapes::SizeExpr& e) = nullptr;
  void* ctx = nullptr;
};
SizeReadHook& size_read_hook();  // this thread's
void size_read(const SymValue& v);  // calls the hook when v is a size-derived int

// SymValue::name of an exception the trace made or caught (calls.cpp, exceptions.cpp): read in
// the trace, never handed to run time (continuation.cpp, eval_hook's return template), nor its
// traceback read (attributes.cpp).
inline constexpr const char* kTraceException = "__fd_exception__";
// SymValue::name of an Object's `__dict__` read in the trace (objects.cpp): a Dict sharing the
// object's box, never handed to run time (continuation.cpp, eval_hook's return template).
inline constexpr const char* kObjectDict = "__fd_object_dict__";

struct SymValue {
  enum class Kind : uint8_t {
    Null,        // the NULL of PUSH_NULL / LOAD_GLOBAL's null bit
    Constant,    // obj (strong) known at trace time
    Tensor,      // tensor: a graph value
    Tuple,       // items (built in the trace, or a constant tuple holding tensors)
    List,        // box->items; obj: nullptr for a list, the class for an instance of a plain
                 // list subclass (transformers' LogitsProcessorList: objects.cpp), rebuilt as
                 // that class called on the items
    Slice,       // items: start, stop, step
    Method,      // a tensor method bound to items[0]: name
    NamedTuple,  // items with field_names; obj: the type (torch.return_types.*, namedtuples)
    Dict,        // box->keys (constants) and box->items, in insertion order; obj: nullptr for a
                 // dict, collections.OrderedDict for one (same methods in the trace; rebuilt
                 // as OrderedDict({...}))
    Iterator,    // box->items, next at box->pos
    Function,    // made by MAKE_FUNCTION in the trace: obj code, box->items defaults,
                 // box->keys kw-default names with box->closure values, box->closure cells
    Cell,        // box->items holds 0 or 1 value; obj (+source): a real cell read lazily
    BoundMethod, // items[0] self, obj the function (Python-level method of a user object)
    Record,      // a dataclass instance made in the trace: obj its type, field_names/items;
               // box (empty) is its identity, so that it is built once however often it is used
    Set,         // a set made in the trace: obj a private real set of its (constant) items, which
                 // the trace mutates as eager mutates its set (same operations, same iteration
                 // order); box is its identity. The transformed code gives each call a copy.
    Object,      // an object of a plain Python class made in the trace (symbolic/objects.cpp):
                 // obj its class; box->keys its attribute names (str constants) and box->items
                 // their values, in assignment order; box is its identity
    Unread,      // an item of a continuation's argument list not read yet (obj, source): its
                 // prologue stores it to its slot, and its first read there wraps it (and guards
                 // it, Tracer::local); one never read is handed on from its source, unguarded
                 // (a `t0 = time.perf_counter()` that crosses a break is not its value)
  };
  Kind kind = Kind::Constant;
  PyObject* obj = nullptr;        // Constant: strong ref; Tensor from outside: the live tensor
  codegen::ValueId tensor = -1;
  std::vector<SymValue> items;
  std::string name;               // Method name
  std::vector<std::string> field_names;
  SourcePtr source;               // non-null for values read from outside the frame
  std::shared_ptr<SymBox> box;  // List, Dict, Iterator, Function, Cell, Record, Object
  std::shared_ptr<const codegen::shapes::SizeExpr> size;  // a size-derived int (see SizeReadHook)
  bool torch_size = false;  // a Tuple that is a torch.Size (x.shape with size-derived ints)

  SymValue() = default;
  SymValue(const SymValue& o);
  SymValue& operator=(const SymValue& o);
  SymValue(SymValue&& o) noexcept;
  SymValue& operator=(SymValue&& o) noexcept;
  ~SymValue();

  static SymValue null() { SymValue v; v.kind = Kind::Null; return v; }
  static SymValue constant(PyObject* borrowed, SourcePtr src = nullptr);
  static SymValue of_tensor(codegen::ValueId id) { SymValue v; v.kind = Kind::Tensor; v.tensor = id; return v; }
  static SymValue tuple(std::vector<SymValue> items) { SymValue v; v.kind = Kind::Tuple; v.items = std::move(items); return v; }
  static SymValue list(std::vector<SymValue> items);
  static SymValue boxed(Kind kind);  // a fresh List/Dict/Iterator/Function/Cell with an empty box

  // NB: a size-derived int answers true and is specialised (size_read): a caller that keeps its
  // expression must test `size` first.
  bool is_constant() const {
    if (size) size_read(*this);
    return kind == Kind::Constant;
  }
  bool is_tensor() const { return kind == Kind::Tensor; }
  // True if this value (recursively) contains no tensor and can be materialised as a Python
  // object.
  bool is_python_constant() const;
  bool is_null() const { return kind == Kind::Null; }
  // Whether this value is, or holds at any depth, the list/dict/record of box `b` (or holds
  // containers nested deeper than any trace builds): storing it there would make a cycle.
  bool holds_box(const SymBox* b, int depth = 0) const;
  // Items of a tuple, named tuple, slice or list (a list's live items in its box).
  const std::vector<SymValue>& seq() const;
  std::vector<SymValue>& mutable_seq();
};

struct SymBox {
  std::vector<SymValue> items;
  std::vector<SymValue> keys;
  std::vector<SymValue> closure;
  SymValue globals;      // Function: the globals dict of the frame that made it (a constant)
  SymValue annotations;  // Function: MAKE_FUNCTION's annotations, if it had any
  size_t pos = 0;
  bool exhausted = false;  // an iterator whose end a loop or next() has seen
  // Iterator: its items were fixed when it was made (a tuple, range, str, torch.Size, a tensor's
  // rows, a module list's modules); not one over a list, dict or set, whose later mutation
  // eager's iterator would see.
  bool fixed = false;
  // Iterator: the anonymous one a `for` loop holds on the stack where the frame breaks before
  // that loop (break_points.cpp), which only the loop's FOR_ITER consumes. Fixed and so, it is
  // rebuilt as iter() of a tuple of the items still to come (continuation.cpp); an iterator the
  // code can reach (a local, an argument) is not, since its type, copy or pickle would differ.
  bool loop_only = false;
};

}  // namespace fastdyn::symbolic
