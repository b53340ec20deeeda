// symbolic/tracer.h — internal state of one trace, shared by interpreter.cpp (the instruction
// loop and handlers) and conversions.cpp (Python objects <-> symbolic values <-> call args).
// Not part of symbolic/'s interface: include interpreter.h instead.
#pragma once
#include <Python.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/capture.h"
#include "symbolic/bytecode.h"
#include "symbolic/interpreter.h"

namespace fastdyn::symbolic {

// Thrown inside the trace to stop it: unsupported code, never a bug.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Tracer {
 public:
  Tracer(const FrameInputs& frame, TraceResult& result);
  void run();

  // ---- conversions.cpp ----
  // Wraps an object read from outside the frame at `source`, recording its guard.
  SymValue wrap(PyObject* obj, const SourcePtr& source);
  // A trace-time constant (from co_consts or folding): no guard.
  static SymValue constant(PyObject* obj) { return SymValue::constant(obj); }
  codegen::CallArg to_call_arg(const SymValue& v) const;
  // A subscript's index: a tuple is a multi-dimensional index (Tuple), a list is advanced
  // indexing (IntList/TensorList), anything else converts as to_call_arg does.
  codegen::CallArg index_arg(const SymValue& v) const;
  // New reference to the Python object of a constant-only value (tuples built in the trace too).
  PyObject* materialize(const SymValue& v) const;
  SymValue from_capture(codegen::Family fam, const codegen::CaptureResult& r) const;
  const codegen::TensorMeta& meta(const SymValue& v) const { return result_.graph.meta(v.tensor); }

  // ---- recording ----
  SymValue call_family(codegen::Family fam, const std::vector<SymValue>& args,
                       const std::vector<std::pair<std::string, SymValue>>& kwargs, const char* what);
  SymValue record(codegen::Family fam, const std::vector<codegen::CallArg>& args,
                  const std::vector<std::pair<std::string, codegen::CallArg>>& kwargs, const char* what);

 private:
  friend struct Handlers;

  SymValue pop();
  SymValue& top(int depth = 0);
  void push(SymValue v) { stack_.push_back(std::move(v)); }

  SymValue load_global(const std::string& name);
  SymValue load_attr(const SymValue& owner, const std::string& name);
  SymValue tensor_attr(const SymValue& t, const std::string& name);
  SymValue call(const SymValue& callable, std::vector<SymValue> args,
                std::vector<std::pair<std::string, SymValue>> kwargs);
  SymValue call_tensor_method(const SymValue& self, const std::string& name, std::vector<SymValue> args,
                              std::vector<std::pair<std::string, SymValue>> kwargs);
  SymValue binary(const char* symbol, const SymValue& a, const SymValue& b);
  SymValue compare(const char* symbol, const SymValue& a, const SymValue& b);
  SymValue subscript(const SymValue& container, const SymValue& index);
  std::vector<SymValue> unpack(const SymValue& seq, int n);

  const FrameInputs& frame_;
  TraceResult& result_;
  codegen::CaptureContext ctx_;
  std::vector<Instruction> code_;
  std::vector<SymValue> stack_;
  std::vector<std::optional<SymValue>> locals_;  // by localsplus index
  PyObject* kw_names_ = nullptr;  // borrowed from co_consts, pending for the next CALL
  std::unordered_map<PyObject*, codegen::ValueId> tensor_inputs_;  // live tensor -> graph input
  int nargs_ = 0;
  bool done_ = false;
};

// Python name of a value for messages: "Tensor", "int 3", "<function f>".
std::string describe(const SymValue& v);
std::string py_repr(PyObject* o);
PyObject* module_type();  // torch.nn.Module (borrowed, kept for the process)

}  // namespace fastdyn::symbolic
