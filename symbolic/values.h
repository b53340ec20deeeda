// symbolic/values.h — what the symbolic interpreter keeps on its stack and in its locals.
//
// A SymValue is either known at trace time (a Python constant: ints, tuples, torch.Size, dtypes,
// modules, functions...), a tensor of the graph being recorded, a tuple built during the trace,
// a tensor method bound to its tensor, or the NULL the 3.11/3.12 call protocol pushes.
// Values that came from outside the frame remember their Source so guards can be built and the
// transformed code can load them again.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "codegen/capture.h"
#include "codegen/graph.h"

namespace fastdyn::symbolic {

// Where a value read by the trace lives, relative to the frame.
struct Source {
  enum class Kind : uint8_t { Local, Global, Builtin, Closure, Attr, Item, DictItem };
  Kind kind = Kind::Local;
  int index = 0;                   // Local slot, Closure index, Item index
  std::string name;                // Global/Builtin/Attr name, DictItem key; the Local's name
  std::shared_ptr<Source> parent;  // Attr/Item/DictItem
};
using SourcePtr = std::shared_ptr<Source>;

struct SymValue {
  enum class Kind : uint8_t {
    Null,        // the NULL of PUSH_NULL / LOAD_GLOBAL's null bit
    Constant,    // obj (strong) known at trace time
    Tensor,      // tensor: a graph value
    Tuple,       // items (built in the trace, or a constant tuple holding tensors)
    List,        // items
    Slice,       // items: start, stop, step
    Method,      // a tensor method bound to items[0]: name
    NamedTuple,  // items with field_names (torch.return_types.*)
  };
  Kind kind = Kind::Constant;
  PyObject* obj = nullptr;        // Constant: strong ref; Tensor from outside: the live tensor
  codegen::ValueId tensor = -1;
  std::vector<SymValue> items;
  std::string name;               // Method name
  std::vector<std::string> field_names;
  SourcePtr source;               // non-null for values read from outside the frame

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

  bool is_constant() const { return kind == Kind::Constant; }
  bool is_tensor() const { return kind == Kind::Tensor; }
  // True if this value (recursively) contains no tensor and can be materialised as a Python
  // object.
  bool is_python_constant() const;
};

}  // namespace fastdyn::symbolic
