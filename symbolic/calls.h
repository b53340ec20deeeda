// symbolic/calls.h — the helpers shared by the call dispatch (calls.cpp: Tracer::call, inlined
// functions and modules, records) and the builtins on symbolic values (builtins.cpp). Internal to
// symbolic/; Calls is a friend of Tracer.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

struct Calls {
  using Args = std::vector<SymValue>;
  using Kwargs = std::vector<std::pair<std::string, SymValue>>;

  // What an inlined call needs to know about its function.
  struct Target {
    PyCodeObject* code = nullptr;
    PyObject* globals = nullptr;
    Args defaults;
    Kwargs kwdefaults;
    Args cells;
  };

  // Python functions and nn.Modules inlined into a new FrameState (calls.cpp).
  static Target target_of_function(Tracer& t, PyObject* fn, const SourcePtr& fn_source = nullptr);
  static Target target_of_made(Tracer& t, const SymValue& fn);
  static SymValue inline_call(Tracer& t, const Target& tg, Args args, Kwargs kwargs);
  static SymValue call_module(Tracer& t, const SymValue& m, Args args, Kwargs kwargs);

  // Builtins on symbolic values, and torch's __torch_function__ probes (builtins.cpp).
  static PyObject* type_of(Tracer& t, const SymValue& v);
  static SymValue length(Tracer& t, const SymValue& v);
  static bool may_have_torch_function(const SymValue& v);
  static bool torch_function_probe(PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out);
  static bool sum_of_tensors(Tracer& t, Args& args, Kwargs& kwargs, SymValue& out);
  static bool builtin_call(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out);
  static SymValue sorted_constants(Tracer& t, const SymValue& iterable, Kwargs& kwargs);
  static bool tensor_from_data(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out);
  // torch._foreach_* ops as one per-tensor op per list item (foreach.cpp).
  static bool foreach_call(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out);
  // torch._fused_adam_/_fused_adamw_/_fused_sgd_ as their per-parameter updates (fused_optimizers.cpp).
  static bool fused_optimizer_call(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out);

  // copy.deepcopy(x) as the copy it makes, for the values it knows (deep_copy.cpp).
  static bool deep_copy(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out);

  // Dataclass and namedtuple records built in the trace (calls.cpp).
  static bool is_record_type(PyObject* type);
  static SymValue make_record(Tracer& t, PyObject* type, Args args, Kwargs kwargs);
  // A stateless module of torch.nn's own made from constants (`nn.ReLU()`): made for real, once,
  // into *out; false where it is not one (calls.cpp).
  static bool make_stateless_module(Tracer& t, PyObject* cls, const Args& args, const Kwargs& kwargs, SymValue* out);
  static SymValue make_namedtuple(PyObject* type, Args args, Kwargs kwargs);
};

// A builtin of the builtins module by name (borrowed).
PyObject* builtin(const char* name);

}  // namespace fastdyn::symbolic
