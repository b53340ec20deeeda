// eval_hook/compiler.cpp — see compiler.h.
#include "runtime/tensor_check.h"
#include "eval_hook/compiler.h"
#include "eval_hook/skip_rules.h"

#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <chrono>

#include "codegen/aten/aten_backend.h"
#include "codegen/autograd/joint.h"
#include "codegen/backends/backends.h"
#include "codegen/graph/source_location.h"
#include "codegen/loop/passes.h"
#include "codegen/passes/pass_timer.h"
#include "eval_hook/config.h"
#include "eval_hook/hook.h"
#include "codegen/shapes/propagate.h"
#include "runtime/compiled_graph.h"
#include "runtime/cuda_graph_executable.h"
#include "runtime/deferred_executable.h"
#include "runtime/dynamic_executable.h"
#include "runtime/errors.h"
#include "runtime/journal.h"
#include "runtime/tiered_executable.h"
#include "symbolic/assembler.h"
#include "symbolic/bytecode.h"
#include "symbolic/continuation.h"
#include "symbolic/tracer.h"
#include "symbolic/guard_builder.h"

namespace fastdyn::eval_hook {
namespace {

using symbolic::SymValue;

// Builds how the compiled graph's outputs become the frame's return value, appending the graph
// outputs it needs. Throws Unsupported-style InternalError for values it cannot rebuild.
bool build_template(const SymValue& v, codegen::Graph& g, runtime::OutputTemplate& t, std::string& why) {
  switch (v.kind) {
    case SymValue::Kind::Tensor: {
      t.kind = runtime::OutputTemplate::Kind::Output;
      for (size_t i = 0; i < g.outputs.size(); ++i)
        if (g.outputs[i] == v.tensor) {
          t.output = static_cast<int>(i);
          return true;
        }
      g.outputs.push_back(v.tensor);
      t.output = static_cast<int>(g.outputs.size() - 1);
      return true;
    }
    case SymValue::Kind::Constant:
      if (v.name == symbolic::kTraceException) {  // every call must return eager's own (symbolic/exceptions.cpp)
        why = "returning an exception raised in the trace";
        return false;
      }
      t.kind = runtime::OutputTemplate::Kind::Constant;
      t.constant = Py_NewRef(v.obj);
      return true;
    case SymValue::Kind::Tuple:
    case SymValue::Kind::List: {
      if (v.torch_size) {  // built as torch.Size(tuple of items), as a struct sequence is
        static PyObject* size_type = reinterpret_cast<PyObject*>(&THPSizeType);
        SymValue items = v;
        items.torch_size = false;
        if (!build_template(items, g, t, why)) return false;
        t.kind = runtime::OutputTemplate::Kind::NamedTuple;
        t.constant = Py_NewRef(size_type);
        return true;
      }
      if (v.kind == SymValue::Kind::List && v.source) {
        why = "returning a list the caller passed";  // identity matters: bytecode reloads it
        return false;
      }
      t.kind = v.kind == SymValue::Kind::Tuple ? runtime::OutputTemplate::Kind::Tuple : runtime::OutputTemplate::Kind::List;
      const auto& items = v.seq();
      t.items.resize(items.size());
      for (size_t i = 0; i < items.size(); ++i)
        if (!build_template(items[i], g, t.items[i], why)) return false;
      return true;
    }
    case SymValue::Kind::NamedTuple:
      if (!v.obj) {
        why = "returning a named tuple whose type is unknown";
        return false;
      }
      // A struct sequence (torch.return_types.*) is made from the tuple of its fields, a
      // namedtuple by tuple.__new__(cls, fields) (continuation.cpp's rebuild says why).
      t.tuple_new = !PyObject_HasAttrString(v.obj, "n_sequence_fields");
      t.kind = runtime::OutputTemplate::Kind::NamedTuple;
      t.constant = Py_NewRef(v.obj);
      t.items.resize(v.items.size());
      for (size_t i = 0; i < v.items.size(); ++i)
        if (!build_template(v.items[i], g, t.items[i], why)) return false;
      return true;
    default:
      why = "returning a value of this kind (method, slice) is not supported";
      return false;
  }
}

// Op counts from a graph's text: one "= aten::name(" per node.
std::map<std::string, int> count_op_lines(const std::string& text) {
  std::map<std::string, int> counts;
  size_t pos = 0;
  while ((pos = text.find("= aten::", pos)) != std::string::npos) {
    const size_t start = pos + 2;
    const size_t end = text.find('(', start);
    counts[text.substr(start, end - start)]++;
    pos = end;
  }
  return counts;
}

struct Prepared {
  symbolic::TraceResult trace;
  runtime::OutputTemplate out;
  std::string why;
  bool ok = false;
  bool bytecode_return = false;  // effects or a rebuilt result: continuation.h's assemble_return
};

// Where each graph input is read from, as guards name it (L['x'], L['self']...weight): explain().
std::vector<std::string> input_source_names(const symbolic::TraceResult& trace) {
  std::vector<std::string> names;
  names.reserve(trace.input_sources.size());
  for (const symbolic::SourcePtr& s : trace.input_sources) names.push_back(symbolic::source_name(*s));
  return names;
}

// What a run whose graph raised left behind, so whether the frame can be redone eagerly: nothing
// (no random op, which advanced the generator, and no in-place op writing an input's storage), or
// writes into inputs, which a compiled program makes last: redone when it failed before them
// (runtime::redo_if_untouched). An in-place op on a value the graph made (`h = x @ w; h.relu_()`)
// is redone with it.
enum class Redo : uint8_t { Always, IfUntouched, Never };
Redo redo_after_failure(const codegen::Graph& g) {
  for (const codegen::Node& n : g.nodes)
    if (codegen::op_info(n.op).category == codegen::OpCategory::Random) return Redo::Never;
  return codegen::writes_an_input(g) ? Redo::IfUntouched : Redo::Always;
}

// The frame's result goes back through bytecode (continuation.h's assemble_return), not through
// an output template of the graph.
void return_through_bytecode(Prepared& p) {
  p.out = runtime::OutputTemplate();
  p.trace.graph.outputs.clear();
  p.bytecode_return = true;
}

// FASTDYN_LOG=recompiles: which sizes the trace could not keep symbolic, and why.
void log_pins(const symbolic::FrameInputs& frame, const symbolic::TraceResult& trace) {
  if (!config().log_recompiles || trace.graph.symbols.empty()) return;
  std::vector<std::string> names;
  for (const symbolic::SourcePtr& s : trace.input_sources) names.push_back(symbolic::source_name(*s));
  const char* q = PyUnicode_AsUTF8(frame.code->co_qualname);
  for (const std::string& line : codegen::shapes::describe_pins(trace.graph, names))
    log_event("recompile", std::string(q ? q : "?") + ": " + line);
}

Prepared prepare(const symbolic::FrameInputs& frame) {
  Prepared p;
  p.trace = symbolic::trace_frame(frame);
  log_pins(frame, p.trace);
  if (!p.trace.ok) {
    p.why = p.trace.reason;
    return p;
  }
  if (p.trace.stopped) return p;
  // Side effects to replay, or a result no template can build (a dataclass made in the frame):
  // the transformed code does it in bytecode.
  if (!p.trace.effects.empty() || !build_template(p.trace.return_value, p.trace.graph, p.out, p.why))
    return_through_bytecode(p);
  p.ok = true;
  return p;
}

// Compiles g on the backend `requested` resolves to (codegen/backends/): a graph the backend
// cannot take runs on aten (logged under FASTDYN_LOG=code with the reason). A tiered backend
// (llvm_cpu) with config().background_compile compiles on the background worker and the graph
// runs on aten until it is ready, unless it is in the disk cache and large enough that loading it
// now beats running it op by op (a warm start: PreparedGraph::load_now).
// `first` says how the first call may be served:
enum class FirstCall {
  // The graph passes run where the tiering is decided, on the caller's thread, and no warm start
  // can pay for the graph (a small one: codegen::warm_start_may_pay): the passes go to the
  // background with the kernels, and this call runs on aten (about 1 ms less on the calling thread
  // for a 2-layer transformer's 3.7 ms compile). Not in diagnostic modes that show the program
  // at once (explain(), the report's journal), and not without background compiles.
  Deferred,
  // The passes run now; it first tries the executable from kernels already built (a dynamic entry
  // at a new size, planned in the background: most of its kernels do not depend on that size and
  // were built for an earlier one), which then runs compiled from its first call instead of on aten.
  Reused,
};
runtime::ExecutablePtr compile_on_backend(const codegen::Graph& g, const char* qualname, codegen::Backend requested,
                                          FirstCall first);

// CUDA graphs an entry may capture (one per set of sizes; mode="reduce-overhead").
constexpr int kCudaGraphsPerEntry = 8;

bool on_cuda(const codegen::Graph& g) {
  for (codegen::ValueId v : g.inputs)
    if (g.meta(v).device.is_cuda()) return true;
  return false;
}

// The graphs of one entry share a family: its bound and memory pool (runtime/cuda_graph_executable.h).
// Null when the target does not replay CUDA graphs or the graph is not on a GPU.
std::shared_ptr<PyObject> cuda_graph_family(const codegen::Graph& g, const char* qualname, const Target& target) {
  if (!target.cuda_graphs || !on_cuda(g)) return nullptr;
  PyObject* family = runtime::new_cuda_graph_family(qualname, kCudaGraphsPerEntry);
  if (!family) {
    PyErr_Clear();
    throw InternalError("creating the CUDA graph family of " + std::string(qualname) + " failed");
  }
  return std::shared_ptr<PyObject>(family, [](PyObject* o) {
    if (!Py_IsInitialized()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(o);
    PyGILState_Release(gil);
  });
}

runtime::ExecutablePtr with_cuda_graphs(runtime::ExecutablePtr exe, const codegen::Graph& g, const char* qualname,
                                        const std::shared_ptr<PyObject>& family) {
  if (!family) return exe;
  // A capture runs the graph (warm-up) and records it: random ops would draw twice at the capture
  // call and leave the generator where eager would not; such graphs run compiled, uncaptured.
  std::string not_capturable;
  for (const codegen::Node& n : g.nodes)
    if (codegen::op_info(n.op).category == codegen::OpCategory::Random)
      not_capturable = "it draws random numbers (" + codegen::qualified_name(n.op) + "), which a capture would draw twice";
  if (codegen::autograd::needs_autograd(g)) not_capturable = "its outputs require grad (each call makes its own autograd node)";
  for (const codegen::TensorMeta& m : g.values)
    if (m.device.is_cpu())
      not_capturable = "it computes with CPU tensors (an optimizer's step counts), which a replay would not read again";
  return std::make_shared<runtime::CudaGraphExecutable>(std::move(exe), g.outputs.size(), family.get(), qualname,
                                                        std::move(not_capturable));
}

// A graph with live size symbols: one executable for every size, which compiles the graph
// specialised to a call's sizes the first time it meets them (runtime/dynamic_executable.h).
runtime::ExecutablePtr compile_dynamic(const codegen::Graph& g, const char* qualname, const Target& target) {
  // On aten, one executable serves every size: it evaluates the graph's size arguments at each call.
  std::shared_ptr<PyObject> family = cuda_graph_family(g, qualname, target);
  if (!family && codegen::resolve_backend(target.backend, g) == codegen::Backend::Aten) return codegen::compile_aten(g);
  std::vector<runtime::DynamicExecutable::Symbol> symbols;
  std::vector<size_t> ids;
  for (size_t k = 0; k < g.symbols.size(); ++k)
    if (codegen::shapes::is_live(g, static_cast<codegen::shapes::SymbolId>(k))) {  // unified ones are their root
      symbols.push_back({g.symbols[k].input, g.symbols[k].dim});
      ids.push_back(k);
    }
  auto graph = std::make_shared<const codegen::Graph>(g);
  std::string program = "dynamic over";
  for (size_t k : ids) program += " s" + std::to_string(k);
  program += " (one compile per size met)\n" + codegen::print_graph(g);
  // The entry's background compile in flight, if any: while it runs, a new size runs on aten
  // and is planned at its first call after it settled (runtime/deferred_executable.h), instead of
  // running the graph passes and queueing the same kernels again at every new size.
  auto in_flight = std::make_shared<std::weak_ptr<runtime::TieredExecutable>>();
  // What those sizes run meanwhile: the graph on aten, one executable for all of them (made at the
  // first such size; called under the DynamicExecutable's lock).
  auto on_aten = [graph, exe = std::make_shared<runtime::ExecutablePtr>()] {
    if (!*exe) *exe = codegen::compile_aten(*graph);
    return *exe;
  };
  return std::make_shared<runtime::DynamicExecutable>(
      std::move(symbols),
      [graph, ids, hints = codegen::shapes::hints(g), qn = std::string(qualname), requested = target.backend,
       in_flight, on_aten, family, built_before = false](const std::vector<int64_t>& sizes) mutable -> runtime::ExecutablePtr {
        std::vector<int64_t> binding = hints;
        for (size_t i = 0; i < ids.size(); ++i) binding[ids[i]] = sizes[i];
        stats().sizes_compiled++;
        std::weak_ptr<runtime::TieredExecutable> pending = *in_flight;
        auto settled = [pending] {
          std::shared_ptr<runtime::TieredExecutable> t = pending.lock();
          return !t || t->settled();
        };
        // The graph is specialised to these sizes where it is planned: a copy of the graph (30-40
        // µs for a 2-layer transformer) that a decode step running on aten meanwhile would
        // otherwise pay at every new length.
        auto plan = [graph, binding = std::move(binding), qn, requested](FirstCall first) {
          codegen::PassTimer timer;
          const codegen::Graph specialised = codegen::shapes::specialize(*graph, binding);
          timer.lap("specialize");
          return compile_on_backend(specialised, qn.c_str(), requested, first);
        };
        // A size met once the kernels are built: the graph passes at this size (about 1 ms for a
        // 2-layer transformer, more than a decode step on aten) run on the background thread, and
        // this call runs on aten until then. A decode loop meets a new length at every step and
        // each only once: planning on the calling thread made each such step slower than eager's.
        auto plan_in_background = [on_aten, plan] {
          if (!config().background_compile) return plan(FirstCall::Reused);
          return runtime::ExecutablePtr(runtime::compile_in_background(
              on_aten(), "a new size: runs on aten while the graph is planned at these sizes in the background",
              [plan] { return plan(FirstCall::Reused); }));
        };
        // NB: with_cuda_graphs reads what no size changes (random ops, autograd): the symbolic graph.
        if (!settled()) {
          // Met while the first kernels compile: it runs on aten until they are built, and is
          // planned at its first call after that (in the background, as any later size).
          if (config().log_code) log_event("code", qn + ": a new size runs on aten until the kernels in flight are built");
          return with_cuda_graphs(
              std::make_shared<runtime::DeferredExecutable>(
                  on_aten(), settled, plan_in_background,
                  "runs on aten until the kernels an earlier size is compiling are built, then compiles from them:"),
              *graph, qn.c_str(), family);
        }
        if (built_before) return with_cuda_graphs(plan_in_background(), *graph, qn.c_str(), family);
        runtime::ExecutablePtr exe = plan(FirstCall::Deferred);  // the entry's first size: nothing built to reuse
        if (auto tiered = std::dynamic_pointer_cast<runtime::TieredExecutable>(exe); tiered && !tiered->settled())
          *in_flight = tiered;
        built_before = true;
        return with_cuda_graphs(std::move(exe), *graph, qn.c_str(), family);
      },
      std::move(program));
}

// The executable of a traced graph for `target`: a dynamic graph's serves every size.
runtime::ExecutablePtr compile_graph(const codegen::Graph& g, const char* qualname, const Target& target) {
  if (codegen::shapes::is_dynamic(g)) return compile_dynamic(g, qualname, target);
  return with_cuda_graphs(compile_on_backend(g, qualname, target.backend, FirstCall::Deferred), g, qualname,
                          cuda_graph_family(g, qualname, target));
}

namespace {

// g on aten now, and build()'s executable from the first call after the worker made it; build's
// failure is reported (the graph keeps running on aten).
runtime::ExecutablePtr on_aten_until_built(const codegen::Graph& g, std::string pending, const char* qualname, const char* name,
                                           std::function<runtime::ExecutablePtr()> build) {
  return runtime::compile_in_background(
      codegen::compile_aten(g), std::move(pending),
      [build = std::move(build), qn = std::string(qualname), bn = std::string(name), log_code = config().log_code]() -> runtime::ExecutablePtr {
        try {
          runtime::ExecutablePtr ready = build();
          if (log_code) log_event("code", qn + ": kernels ready, " + bn + " runs the following calls");
          return ready;
        } catch (const std::exception& e) {
          backend_failures()++;
          log_event("code", qn + ": " + bn + " failed, running on aten: " + e.what());
          throw;
        }
      });
}

// FirstCall::Deferred: g on aten now, its graph passes and kernels on the background worker (a
// backend's refusal, loop::Unsupported, by design, leaves it on aten).
runtime::ExecutablePtr passes_and_kernels_in_background(const codegen::Graph& g, codegen::Backend backend, const char* qualname,
                                                        const char* name) {
  auto graph = std::make_shared<const codegen::Graph>(g);
  return on_aten_until_built(
      g, std::string("backend ") + name + " (kernels compiling in the background, after the graph passes; calls run on aten until they are ready)",
      qualname, name, [graph, backend, qn = std::string(qualname), log_code = config().log_code]() -> runtime::ExecutablePtr {
        try {
          return codegen::prepare_graph(*graph, backend).finish();
        } catch (const codegen::loop::Unsupported& e) {
          if (log_code) log_event("code", qn + ": runs on aten: " + e.what());
          return codegen::compile_aten(*graph);
        }
      });
}

// FirstCall::Deferred's conditions (see there).
bool passes_in_background(const codegen::Graph& g, codegen::Backend backend, FirstCall first) {
  return first == FirstCall::Deferred && config().background_compile && !explain_recording() && !runtime::journal::on() &&
         !codegen::warm_start_may_pay(g, backend);
}

}  // namespace

runtime::ExecutablePtr compile_on_backend(const codegen::Graph& g, const char* qualname, codegen::Backend requested,
                                          FirstCall first) {
  const codegen::Backend backend = codegen::resolve_backend(requested, g);
  if (backend == codegen::Backend::Aten) return codegen::compile_aten(g);
  const char* name = codegen::backend_name(backend);
  const bool log_code = config().log_code;
  try {
    if (config().test_fail_backend)
      throw InternalError("injected backend failure (test hook) at " + (g.nodes.empty() ? std::string("an empty graph") : codegen::print_node(g, g.nodes.front())));
    runtime::ExecutablePtr exe;
    if (passes_in_background(g, backend, first)) {
      exe = passes_and_kernels_in_background(g, backend, qualname, name);
    } else {
      codegen::PreparedGraph prepared = codegen::prepare_graph(g, backend);
      if (first == FirstCall::Reused && prepared.from_cache && (exe = prepared.from_cache())) {
        if (log_code) log_event("code", std::string(qualname) + ": every kernel was built before: compiled from the first call at these sizes");
      } else if (prepared.load_now && (exe = prepared.load_now())) {
        if (log_code) log_event("code", std::string(qualname) + ": kernels loaded from the disk cache for the first call (a warm start)");
      } else if (prepared.tiered && config().background_compile) {
        std::string pending = prepared.program;
        pending.insert(pending.find('\n'), " (kernels compiling in the background; calls run on aten until they are ready)");
        exe = on_aten_until_built(g, std::move(pending), qualname, name, std::move(prepared.finish));
      } else {
        exe = prepared.finish();
      }
    }
    if (log_code) log_event("code", std::string(qualname) + "\n" + exe->describe());
    return exe;
  } catch (const codegen::loop::Unsupported& e) {
    if (log_code) log_event("code", std::string(qualname) + ": runs on aten: " + e.what());
  } catch (const std::exception& e) {
    // A compiler bug or a backend's refusal must not cost the user the graph: aten runs it.
    // Strict mode (the test suite) makes it the error it is.
    backend_failures()++;
    if (config().strict) throw;
    log_event("code", std::string(qualname) + ": " + name + " failed, running on aten: " + e.what());
  }
  return codegen::compile_aten(g);
}

// Wraps `code` (a new reference, consumed) as the entry's function: the frame's globals and
// qualname, run by the default evaluator. It holds no closure: a frame with one runs through a
// function of its own (hook.cpp's run_entry), so that an entry keeps no cell alive.
void set_transformed_function(CacheEntry& entry, PyCodeObject* code, const symbolic::FrameInputs& frame) {
  mark_skip(code);  // the transformed code runs by the default evaluator
  entry.fn = PyFunction_NewWithQualName(reinterpret_cast<PyObject*>(code), frame.globals, frame.code->co_qualname);
  Py_DECREF(code);
  if (!entry.fn) {
    PyErr_Clear();
    throw InternalError("creating the transformed function failed");
  }
  entry.nargs = symbolic::argument_slots(frame.code);
}

std::vector<std::string> node_locations(const codegen::Graph& g) {
  std::vector<std::string> out;
  out.reserve(g.nodes.size());
  for (const codegen::Node& n : g.nodes) out.push_back(codegen::location_text(n.loc));
  return out;
}

void log_entry(const char* qualname, const CacheEntry& entry) {
  const Config& cfg = config();
  if (cfg.log_graphs && !entry.graph_text.empty()) log_event("graph", std::string(qualname) + "\n" + entry.graph_text);
  if (cfg.log_guards) {
    std::string g;
    for (const std::string& s : entry.guards->describe()) g += "\n  " + s;
    log_event("guards", std::string(qualname) + g);
  }
  if (cfg.log_code) {
    log_event("code", std::string(qualname) + "\n" +
                          symbolic::disassemble(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(entry.fn))));
  }
}

// Dataclasses the transformed code constructs for the user (a model output) run their generated
// __init__ and bookkeeping methods then: Python with no tensor op, so the hook leaves them alone.
void skip_code_tree(PyCodeObject* code) {  // the code and the comprehensions/lambdas inside it
  mark_skip(code);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code->co_consts); ++i)
    if (PyCode_Check(PyTuple_GET_ITEM(code->co_consts, i)))
      skip_code_tree(reinterpret_cast<PyCodeObject*>(PyTuple_GET_ITEM(code->co_consts, i)));
}

void skip_record_constructors(const SymValue& v) {
  if (v.kind == SymValue::Kind::Record) {
    for (const char* m : {"__init__", "__post_init__", "__setattr__", "__setitem__"}) {
      PyObject* f = PyObject_GetAttrString(v.obj, m);
      if (f && PyFunction_Check(f)) skip_code_tree(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(f)));
      Py_XDECREF(f);
      PyErr_Clear();
    }
  }
  for (const SymValue& i : v.kind == SymValue::Kind::List || v.kind == SymValue::Kind::Object ? v.box->items : v.items)
    skip_record_constructors(i);
}

// A trace that stopped at a graph break (the graph so far, then the breaking instruction and a
// continuation), or that returns through bytecode (side effects, a rebuilt result): the graph
// returns a tuple of the tensors the bytecode needs (symbolic/continuation.h).
void compile_break(const symbolic::FrameInputs& frame, const Target& target, Prepared& p, CompileOutcome& outcome) {
  symbolic::TraceResult& trace = p.trace;
  outcome.reason = trace.reason;
  const char* qualname = PyUnicode_AsUTF8(frame.code->co_qualname);
  if (!qualname) qualname = "?";
  bool tensor_args = false;
  for (int i = 0; i < symbolic::argument_slots(frame.code); ++i)
    tensor_args = tensor_args || (frame.localsplus[i] && runtime::is_tensor_object(frame.localsplus[i]));
  // A continuation's locals come in one list, whose items its trace reads only where it uses them.
  if (PyObject* list = frame.localsplus[0]; list && symbolic::is_resume_prologue(frame.code, 0) && PyList_Check(list))
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i)
      tensor_args = tensor_args || runtime::is_tensor_object(PyList_GET_ITEM(list, i));
  if (trace.stopped && trace.graph.nodes.empty() && trace.input_sources.empty() && !tensor_args && !config().compile_tensor_free) {
    // No tensor anywhere before the break: not worth a continuation (pure Python stays as is).
    outcome.kind = CompileOutcome::Kind::Unsupported;
    return;
  }
  auto entry = std::make_unique<CacheEntry>();
  const std::vector<codegen::ValueId> outputs = symbolic::break_outputs(trace);
  // NB: a graph with no op still runs when the bytecode needs tensors from it: the rebuilt
  // locals, stack and side effects read every tensor from the graph's output tuple, so tensors
  // that are only passed through (`self.w = self.w.to(self.device)` on the same device) must be
  // in it.
  if (!trace.graph.nodes.empty() || !outputs.empty()) {
    trace.graph.outputs = outputs;
    runtime::OutputTemplate tpl;
    tpl.kind = runtime::OutputTemplate::Kind::Tuple;
    tpl.items.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      tpl.items[i].kind = runtime::OutputTemplate::Kind::Output;
      tpl.items[i].output = static_cast<int>(i);
    }
    runtime::ExecutablePtr exe = compile_graph(trace.graph, qualname, target);
    entry->code_text = exe->describe();
    entry->graph = runtime::make_compiled_graph(std::move(exe), std::move(tpl), qualname);
    if (!entry->graph) throw InternalError("creating the compiled graph object failed");
    entry->graph_text = codegen::print_graph(trace.graph);
    entry->input_sources = input_source_names(trace);
    if (runtime::journal::on()) outcome.node_locations = node_locations(trace.graph);
  }
  skip_record_constructors(trace.return_value);
  for (const SymValue& v : trace.stack) skip_record_constructors(v);
  for (const auto& l : trace.locals)
    if (l) skip_record_constructors(*l);
  std::string why;
  PyCodeObject* code = trace.stopped
      ? symbolic::assemble_break(frame.code, trace, entry->graph, outputs, frame.globals, &why)
      : symbolic::assemble_return(frame.code, trace, entry->graph, outputs, frame.globals, &why);
  if (!code) {
    outcome.kind = CompileOutcome::Kind::Unsupported;
    outcome.reason = trace.stopped ? outcome.reason + " (no graph break: " + why + ")" : why;
    outcome.raises = trace.stopped && trace.raises;
    return;
  }
  set_transformed_function(*entry, code, frame);
  entry->rerun_on_error = false;  // the continuation may have run user code with side effects
  const Redo redo = trace.graph.nodes.empty() ? Redo::Never : redo_after_failure(trace.graph);  // no graph: nothing of its own to fail
  entry->rerun_if_graph_raised = redo == Redo::Always;
  entry->rerun_if_untouched = redo == Redo::IfUntouched;
  entry->direct = false;
  entry->guards = symbolic::build_guards(trace);
  log_entry(qualname, *entry);
  entry->broke = trace.stopped;
  entry->break_reason = trace.reason;
  entry->break_file = trace.filename;
  entry->break_line = trace.lineno;
  outcome.graph_ops = static_cast<int>(trace.graph.nodes.size());
  outcome.kind = CompileOutcome::Kind::Compiled;
  outcome.broke = trace.stopped;
  outcome.entry = std::move(entry);
}

}  // namespace

CompileOutcome compile_frame(const symbolic::FrameInputs& frame, const Target& target) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileOutcome outcome;
  codegen::PassTimer timer;
  Prepared p = prepare(frame);
  timer.lap("trace");
  outcome.filename = p.trace.filename;
  outcome.lineno = p.trace.lineno;
  // A frame under a native-only path (torch.optim: skip_rules.h) whose graph reaches a GPU that no
  // native backend takes runs as written. (On the CPU, ATen's op-by-op run of the step does not
  // lose to torch.optim's loops: a build without LLVM keeps it.)
  bool on_gpu = false;
  for (const codegen::TensorMeta& m : p.trace.graph.values) on_gpu = on_gpu || m.device.is_cuda();
  if (native_only(frame.code) && on_gpu && target.backend != codegen::Backend::Aten &&
      codegen::resolve_backend(target.backend, p.trace.graph) == codegen::Backend::Aten) {
    outcome.kind = CompileOutcome::Kind::Unsupported;
    outcome.reason = std::string("a graph from ") + PyUnicode_AsUTF8(frame.code->co_filename) +
                     " that no native backend takes (its devices), run as written: op by op on ATen it would lose to "
                     "torch.optim's own multi-tensor kernels";
    return outcome;
  }
  if ((p.ok || p.trace.stopped || p.bytecode_return) && p.trace.op_in_try && redo_after_failure(p.trace.graph) != Redo::Always) {
    // A graph runs before everything the frame does after it: when it raises (an index out of
    // range), only redoing the frame eagerly reaches the except clause around the op. A graph
    // that wrote an input or drew random numbers cannot be redone.
    outcome.kind = CompileOutcome::Kind::Unsupported;
    outcome.reason = "an op inside a try block with an except clause, in a graph that writes into an input or draws random numbers "
                     "(its failure must reach the except clause as written)";
    return outcome;
  }
  if (p.trace.stopped || p.bytecode_return) {
    // A frame that runs to its return without a tensor op gains nothing from a cache entry, even
    // with attribute stores to replay (`self.count += 1`): its guards would pin the values it read
    // (the count) and miss on every call.
    if (p.bytecode_return && p.trace.graph.nodes.empty() && !config().compile_tensor_free) {
      outcome.kind = CompileOutcome::Kind::NoTensors;
      return outcome;
    }
    compile_break(frame, target, p, outcome);
    stats().compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return outcome;
  }
  if (!p.ok) {
    outcome.kind = CompileOutcome::Kind::Unsupported;
    outcome.reason = p.why;
    outcome.retry_later = p.trace.retry_later;
    outcome.raises = p.trace.raises;
    return outcome;
  }
  if (p.trace.graph.nodes.empty()) {
    if (!config().compile_tensor_free) {
      outcome.kind = CompileOutcome::Kind::NoTensors;
      return outcome;
    }
    return_through_bytecode(p);  // the test knob: an entry with no graph
    compile_break(frame, target, p, outcome);
    return outcome;
  }
  auto entry = std::make_unique<CacheEntry>();
  const char* qname = PyUnicode_AsUTF8(frame.code->co_qualname);
  runtime::ExecutablePtr exe = compile_graph(p.trace.graph, qname ? qname : "?", target);
  timer = codegen::PassTimer();
  entry->graph_text = codegen::print_graph(p.trace.graph);
  entry->input_sources = input_source_names(p.trace);
  entry->code_text = exe->describe();
  if (runtime::journal::on()) outcome.node_locations = node_locations(p.trace.graph);
  const char* qualname = PyUnicode_AsUTF8(frame.code->co_qualname);
  entry->graph = runtime::make_compiled_graph(std::move(exe), std::move(p.out), qualname ? qualname : "?");
  if (!entry->graph) throw InternalError("creating the compiled graph object failed");
  set_transformed_function(*entry, symbolic::assemble_graph_call(frame.code, p.trace, entry->graph), frame);
  const Redo redo = redo_after_failure(p.trace.graph);
  entry->rerun_on_error = redo == Redo::Always;
  entry->rerun_if_untouched = redo == Redo::IfUntouched;
  // NB: a graph that cannot be re-run eagerly on error keeps its frame, so that a traceback
  // still names the user's function.
  entry->direct = entry->rerun_on_error;
  for (const symbolic::SourcePtr& s : p.trace.input_sources) {
    if (s->kind != symbolic::Source::Kind::Local) entry->direct = false;
    else entry->direct_slots.push_back(s->index);
  }
  entry->guards = symbolic::build_guards(p.trace);

  timer.lap("guards_and_bytecode");
  log_entry(qualname ? qualname : "?", *entry);
  stats().compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  outcome.graph_ops = static_cast<int>(p.trace.graph.nodes.size());
  outcome.kind = CompileOutcome::Kind::Compiled;
  outcome.entry = std::move(entry);
  return outcome;
}

void record_outcome(ExplainReport& r, const CompileOutcome& out) {
  if (out.kind == CompileOutcome::Kind::NoTensors) return;
  const bool counted = out.counts_as_graph_break();
  if (counted || out.broke) {  // a break before any op is listed too, apart (break_counted)
    r.graph_break_count += counted ? 1 : 0;
    r.break_reasons.push_back(out.reason);
    r.break_filenames.push_back(out.filename);
    r.break_linenos.push_back(out.lineno);
    r.break_counted.push_back(counted);
  }
  if (out.kind != CompileOutcome::Kind::Compiled || out.graph_ops == 0) return;
  r.graph_count++;
  const CacheEntry& e = *out.entry;
  r.graphs.push_back(e.graph_text);
  r.graph_inputs.push_back(e.input_sources);
  r.code.push_back(e.code_text);
  r.op_counts.push_back(count_op_lines(e.graph_text));
  for (const std::string& g : e.guards->describe()) r.guards.push_back(g);
}

}  // namespace fastdyn::eval_hook
