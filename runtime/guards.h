// runtime/guards.h — guard trees: the conditions under which a compiled cache entry is valid.
//
// A tree of accessor nodes (frame local by index, global, builtin, closure cell, attribute,
// tuple/list item) with leaf checks (type identity, object identity, constant equality, tensor
// dtype/device/sizes/strides/requires_grad/dispatch keys) plus global state (grad mode, default
// dtype) and aliasing (tensors and type-guarded instances that were distinct objects must stay
// distinct, and one object reached by two paths must stay one). It is
// evaluated in C++ directly on the frame's fast locals: no dict or Python object is built on the
// hit path, and shared accessor prefixes are evaluated once.
// Size symbols (codegen/shapes): a tensor check's dynamic dims admit any size >= 2 and bind a
// symbol (two dims binding one symbol must agree), and SizeRelations over the bound symbols are
// checked after the tree (the ranges and equalities a trace's comparisons relied on).
// One evaluator serves both the fast boolean check and the "why did this miss" report: pass a
// non-null GuardFailure to get the first failing guard described.
// Ownership: the tree holds strong references to every object it compares against.
#pragma once
#include <Python.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/autocast_state.h"

namespace fastdyn::runtime {

// What a frame offers to guards; all borrowed.
struct GuardFrame {
  PyObject* const* fast_locals = nullptr;  // localsplus: arguments by slot index
  PyObject* globals = nullptr;             // dict
  PyObject* builtins = nullptr;            // dict
  PyObject* closure = nullptr;             // tuple of cells, or nullptr
};

// Const: a fixed object the tree holds (an inlined function's globals dict, say), the root of
// paths that do not start in the frame.
enum class AccessKind : uint8_t { Local, Global, Builtin, Closure, Attr, Item, DictItem, Const };

struct Accessor {
  AccessKind kind = AccessKind::Local;
  int index = 0;              // Local slot, Closure index, Item index
  std::string name;           // Global/Builtin/Attr name, and the Local's name for messages
  PyObject* key = nullptr;    // interned `name` (strong), so the hit path builds no string
  PyObject* object = nullptr; // Const: the object; DictItem: a key other than a str (borrowed
                              // here; the tree keeps it alive); a weak reference there stands
                              // for its referent (a tensor key: the item is missing once it died)
};

// A dim whose size is a symbol of the compiled graph (codegen/shapes/propagate.h): any size of
// 2 or more holds (0 and 1 stay specialised), with a row-major layout.
constexpr int64_t kDynamicSize = -1;
// A stride the check leaves free (TensorSpec::strides; a dim of size 1, see add_tensor).
constexpr int64_t kAnyStride = INT64_MIN;

// What a trace relied on about its size symbols, beyond each being 2 or more:
//   constant + sum coef * s<id>  (>= | == | !=)  0
// (s0 >= 21 after `if x.shape[1] >= 21`, s0 + 1 != s1, ...). Symbols are bound by the dynamic
// dims of the tensor checks (TensorSpec::symbols) during the same check; two dims bound to one
// symbol must agree (sizes an op needed equal), which is the equality relation between inputs.
struct SizeRelation {
  enum class Kind : uint8_t { Ge, Eq, Ne } kind = Kind::Ge;
  int64_t constant = 0;
  std::vector<std::pair<int32_t, int64_t>> terms;  // (symbol, coefficient)
  std::string str() const;                         // "s0 >= 21", "s0 <= 20", "s0 - s1 != 0"
};

struct TensorSpec {
  PyTypeObject* type = nullptr;  // exact Python type (torch.Tensor, nn.Parameter, ...)
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  std::vector<int64_t> sizes;     // kDynamicSize: a size symbol (any size >= 2)
  std::vector<int32_t> symbols;   // per dim: the symbol a kDynamicSize dim binds, or -1
  std::vector<int64_t> strides;   // empty when a size is dynamic: then row-major (contiguous); kAnyStride: free
  bool requires_grad = false;
  uint64_t dispatch_keys = 0;    // raw DispatchKeySet
};

enum class CheckKind : uint8_t {
  TypeIs,   // type(obj) is expected
  IdIs,     // obj is expected
  Equals,   // type(obj) is type(expected) and obj == expected (ints, floats, str, None, tuples)
  Tensor,   // TensorSpec matches; records obj in its alias slot
  Instance, // type(obj) is expected; records obj in its alias slot (a plain object guarded by type)
  SameAs,   // obj is the object recorded in alias_slot (one object reached by two paths)
  LenIs,    // len(obj) == length (tuples and lists whose items are guarded one by one)
  DictKeys, // obj is a dict whose keys are, in order, those of the tuple `expected` (iteration
            // order is what the trace unrolled; the values are guarded on their own)
  TypeAttr, // looking `name` up on type(obj) finds expected (nullptr: nothing), and unless that
            // is a data descriptor, obj's own __dict__ lacks `name` (plain C, runs no Python)
  Lacks,    // obj is a dict without the key `name` (nn.Module's _parameters lacks 'extra')
  FunctionParts,  // obj is a function with parts' code and globals, no keyword defaults, and
                  // defaults that are parts' (or equal to them): a closure made anew at every
                  // call (its cells are guarded on their own, through __closure__)
};

struct Check {
  CheckKind kind = CheckKind::TypeIs;
  PyObject* expected = nullptr;  // strong; the type for TypeIs
  TensorSpec tensor;
  int alias_slot = -1;           // Tensor, Instance, SameAs: slot in the aliasing table
  Py_ssize_t length = 0;         // LenIs
  PyObject* name = nullptr;      // TypeAttr, Lacks: the interned attribute name (strong)
  PyObject* parts = nullptr;     // IdIs of a function: (code, defaults, kwdefaults) it had (strong)
  bool weak = false;             // IdIs: expected is a weak reference to the object (see add_id_is)
};

struct GuardNode {
  Accessor accessor;
  std::vector<Check> checks;
  std::vector<std::unique_ptr<GuardNode>> children;
};

struct GuardFailure {
  std::string description;  // "L['x'].size() == [4, 8], got [2, 8]"
};

// Whether a TorchFunctionMode or TorchDispatchMode is active: each would see every op, which
// generated code runs without them.
bool python_mode_active();

// Whether a and b are one value as far as a trace could tell: the same types at every level
// (True is not 1, (1,) is not [1]), floats alike in sign (-0.0), containers item by item in
// their iteration order (the order a trace unrolls; a dict subclass against a plain-dict
// snapshot of it), ints, strings, bytes and devices by value, any other object by identity.
// Plain C: runs no Python.
bool strict_equal(PyObject* a, PyObject* b);

class GuardTree {
 public:
  GuardTree() = default;
  ~GuardTree();
  GuardTree(const GuardTree&) = delete;
  GuardTree& operator=(const GuardTree&) = delete;

  // Building (compile time). Returns the node for `accessor` under `parent` (nullptr = root),
  // reusing an existing equal node so that shared prefixes are evaluated once.
  GuardNode* node(GuardNode* parent, const Accessor& accessor);
  void add_type_is(GuardNode* n, PyTypeObject* type);
  // obj is that object; a Python function also still has the code and defaults it had. The
  // object is held weakly where its type allows (the guard then fails once it is gone): a cache
  // entry must not keep alive what the program dropped (an exception with its traceback, frames
  // and tensors; a `self` pinned by its trace).
  void add_id_is(GuardNode* n, PyObject* obj);
  void add_function_parts(GuardNode* n, PyObject* fn);
  // Same value as `value` by strict_equal (a snapshot of a container's contents, say).
  void add_equals(GuardNode* n, PyObject* value);
  // Spec read from the live tensor, the dims in `dynamic` (sizes symbols) excepted. Returns its
  // alias slot.
  // `symbols`, when given, names the size symbol of each dim in `dynamic` (same order): a dim
  // bound to a symbol that another dim bound first must have its size.
  // `size_one_strides_free`: the strides of its dims of size 1 are not checked (nothing the
  // graph returns depends on them; a dim of size 1 is never stepped along).
  int add_tensor(GuardNode* n, PyObject* tensor, const std::vector<int64_t>& dynamic = {},
                 const std::vector<int32_t>& symbols = {}, bool size_one_strides_free = false);
  // A relation between size symbols (bound by add_tensor's dims), checked after the tree.
  void add_relation(SizeRelation r);
  // type(obj) is type(instance), and obj takes an alias slot (returned) like a tensor's.
  int add_instance(GuardNode* n, PyObject* instance);
  void add_same_as(GuardNode* n, int alias_slot);
  void add_len_is(GuardNode* n, Py_ssize_t length);
  void add_dict_keys(GuardNode* n, PyObject* dict);  // snapshot of dict's keys, in order
  // What obj.name resolves to through its class: `found` (nullptr: nothing; the object must not
  // have it either), and the object does not shadow it with its own attribute.
  void add_type_attr(GuardNode* n, const std::string& name, PyObject* found);
  void guard_global_state();  // grad mode, default dtype, autocast and deterministic algorithms, as now
  // No RecordFunction observer (a profiler) is installed, as now: the trace dropped a
  // record_function block that would have recorded nothing.
  void guard_no_record_function_observers();
  // The trace read builtin `name`: a global of that name must stay absent (it would shadow it).
  void add_global_absent(const std::string& name);
  void add_lacks(GuardNode* n, const std::string& key);  // the dict has no key `key`

  // Hit path. Returns true if every guard holds. With `why`, also describes the first failure.
  // Never leaves a Python exception set.
  bool check(const GuardFrame& frame, GuardFailure* why = nullptr) const;

  std::vector<std::string> describe() const;  // one readable line per guard
  size_t size() const;                        // number of leaf checks

 private:
  std::vector<std::unique_ptr<GuardNode>> roots_;
  bool has_global_state_ = false;
  bool grad_enabled_ = true;
  c10::ScalarType default_dtype_ = c10::ScalarType::Float;
  AutocastState autocast_;
  bool deterministic_ = false;
  bool no_observers_ = false;
  int alias_slots_ = 0;
  int symbols_ = 0;  // size symbols bound by tensor checks (ids 0..symbols_-1)
  std::vector<SizeRelation> relations_;
  std::vector<PyObject*> absent_globals_;  // interned names (strong)
};

}  // namespace fastdyn::runtime
