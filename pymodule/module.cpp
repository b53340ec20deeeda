// pymodule/module.cpp — fastdyn._C, the native side of the public API (python/fastdyn/api.py).
//
// Thin bindings only: every function here forwards to eval_hook/, symbolic/ or runtime/ and
// translates fastdyn's C++ errors into Python exceptions (UserError -> ValueError,
// BackendError/InternalError -> RuntimeError).
#include <Python.h>
#include <execinfo.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "codegen/capture/autocast.h"
#include "codegen/autograd/derivatives.h"
#include "codegen/backends/backends.h"
#include "codegen/cuda/backend.h"
#include "codegen/graph/graph_picture.h"
#include "runtime/cuda/cuda_api.h"
#include "eval_hook/code_state.h"
#include "eval_hook/compiler.h"
#include "eval_hook/config.h"
#include "eval_hook/hook.h"
#include "eval_hook/skip_rules.h"
#include "pymodule/check_bindings.h"
#include "pymodule/graph_export.h"
#include "pymodule/jit_function.h"
#include "runtime/background_compiler.h"
#include "runtime/compiled_graph.h"
#include "runtime/errors.h"
#include "runtime/journal.h"
#include "symbolic/assembler.h"
#include "symbolic/bytecode.h"
#ifdef FASTDYN_HAVE_LLVM
#include "codegen/llvm/backend.h"
#include "codegen/llvm/jit_engine.h"
#endif

namespace py = pybind11;
using namespace fastdyn;

namespace {

PyObject* g_graph_break_error = nullptr;  // fastdyn.GraphBreakError (strong)
bool g_enabled = false;

void raise_graph_break(const std::string& reason, const std::string& filename, int lineno) {
  if (!g_graph_break_error) {
    PyErr_SetString(PyExc_RuntimeError, reason.c_str());
    return;
  }
  PyObject* exc = PyObject_CallFunction(g_graph_break_error, "ssi", reason.c_str(), filename.c_str(), lineno);
  if (exc) {
    PyErr_SetObject(g_graph_break_error, exc);
    Py_DECREF(exc);
  }
}

// Parses a user's backend name (ValueError naming the choices) and starts what it needs while
// the user's code runs. A backend this build lacks (llvm_cpu without LLVM 19) is accepted: its
// graphs run on aten (resolve_backend), so that one program runs on every build.
// Whether a backend with a kernel cache may be in use: the default (native) is one, so only a
// process whose every enable()/jit() asked for aten never needs the LLVM engine for stats().
bool g_any_request = false, g_kernel_request = false;
// jit/enable's dynamic=: None (automatic), True (every size a symbol), False (every size static).
symbolic::DynamicMode parse_dynamic(const py::object& v) {
  if (v.is_none()) return symbolic::DynamicMode::Auto;
  if (!PyBool_Check(v.ptr())) throw py::type_error("fastdyn: dynamic must be True, False or None");
  return v.ptr() == Py_True ? symbolic::DynamicMode::Always : symbolic::DynamicMode::Never;
}

codegen::Backend parse_backend(const std::string& name) {
  std::optional<codegen::Backend> b = codegen::parse_backend(name);
  if (!b) throw py::value_error("fastdyn: unknown backend '" + name + "' (expected " + codegen::backend_choices() + ")");
  g_any_request = true;
  if (*b != codegen::Backend::Aten) g_kernel_request = true;
  codegen::prewarm(*b);
  return *b;
}

// jit/enable's mode=: "default", or "reduce-overhead" (CUDA graphs on GPU tensors).
bool parse_mode(const py::object& v) {
  if (v.is_none()) return false;
  if (!PyUnicode_Check(v.ptr())) throw py::type_error("fastdyn: mode must be a str or None");
  const std::string m = v.cast<std::string>();
  if (m == "default") return false;
  if (m == "reduce-overhead") return true;
  throw py::value_error("fastdyn: unknown mode '" + m + "' (expected 'default' or 'reduce-overhead'; " +
                        "torch.compile's 'max-autotune' modes have no fastdyn counterpart)");
}

PyCodeObject* code_of(py::handle fn) {
  py::object f = py::reinterpret_borrow<py::object>(fn);
  if (PyObject* target = pymodule::jit_function_target(f.ptr())) f = py::reinterpret_borrow<py::object>(target);
  if (PyMethod_Check(f.ptr())) f = py::reinterpret_borrow<py::object>(PyMethod_GET_FUNCTION(f.ptr()));
  if (PyCode_Check(f.ptr())) return reinterpret_cast<PyCodeObject*>(f.ptr());
  if (!PyFunction_Check(f.ptr())) throw py::type_error("fastdyn: expected a Python function, got " + std::string(Py_TYPE(f.ptr())->tp_name));
  return reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(f.ptr()));
}

// Runs fn(*args, **kwargs) once from a clean cache with compiling on, recording every graph and
// break; an exception from fn is swallowed (the report is what was seen until then).
py::dict explain(py::handle fn, py::tuple args, py::dict kwargs) {
  eval_hook::reset_all_code_states();
  eval_hook::ExplainReport r;
  eval_hook::set_explain_recorder(&r);
  {
    eval_hook::ModeGuard on(eval_hook::Request{eval_hook::Mode::Compile, false, eval_hook::Target{}});
    eval_hook::install();
    PyObject* out = PyObject_Call(fn.ptr(), args.ptr(), kwargs.ptr());
    eval_hook::uninstall();
    Py_XDECREF(out);
    if (!out) PyErr_Clear();
  }
  eval_hook::set_explain_recorder(nullptr);
  py::dict d;
  d["graph_count"] = r.graph_count;
  d["graph_break_count"] = r.graph_break_count;
  py::list breaks;
  for (size_t i = 0; i < r.break_reasons.size(); ++i)
    breaks.append(py::make_tuple(r.break_reasons[i], r.break_filenames[i], r.break_linenos[i], static_cast<bool>(r.break_counted[i])));
  d["breaks"] = breaks;
  d["op_counts"] = r.op_counts;
  d["guards"] = r.guards;
  d["graphs"] = r.graphs;
  d["graph_inputs"] = r.graph_inputs;
  d["code"] = r.code;
  return d;
}

#ifdef FASTDYN_HAVE_LLVM
// The kernel cache counts over the process; stats() reports them since the last reset(), which
// keeps the compiled kernels themselves (a graph compiled again finds them in memory).
codegen::llvm_jit::CacheStats g_kernel_stats_at_reset;
// NB: asking the cache starts the LLVM engine, which the aten backend never needs.
bool kernel_cache_in_use() { return !g_any_request || g_kernel_request; }
#endif

py::dict stats() {
  const eval_hook::Stats& s = eval_hook::stats();
  py::dict d;
  d["frames_seen"] = s.frames_seen;
  d["frames_compiled"] = s.frames_compiled;
  d["sizes_compiled"] = s.sizes_compiled.load();
  d["cache_hits"] = s.cache_hits;
  d["cache_misses"] = s.cache_misses;
  d["recompiles"] = s.recompiles;
  d["graph_breaks"] = s.graph_breaks;
  d["graphs"] = s.graphs;
  d["compile_seconds"] = s.compile_seconds;
  d["backend_failures"] = eval_hook::backend_failures().load();  // graphs on aten because compiling failed
  const runtime::BackgroundStats bg = runtime::background_stats();
  d["background_compiles"] = bg.finished;          // graphs whose kernels the worker built
  d["background_pending"] = bg.pending;            // still queued or compiling
  d["background_compile_seconds"] = bg.seconds;    // the threads' wall time (off the calling thread)
#ifdef FASTDYN_HAVE_LLVM
  if (kernel_cache_in_use()) {
    const codegen::llvm_jit::CacheStats k = codegen::llvm_jit::cache_stats();
    const codegen::llvm_jit::CacheStats& base = g_kernel_stats_at_reset;
    d["kernel_compiles"] = k.compiles - base.compiles;                    // kernels LLVM compiled
    d["kernel_memory_hits"] = k.memory_hits - base.memory_hits;           // found already compiled
    d["kernel_disk_hits"] = k.disk_hits - base.disk_hits;                 // loaded from the disk cache
    d["kernel_cache_rejected"] = k.rejected_files - base.rejected_files;  // corrupt or foreign files
    d["kernel_memory_evictions"] = k.memory_evictions - base.memory_evictions;  // past FASTDYN_KERNEL_CACHE_SIZE
  }
#endif
  return d;
}

}  // namespace

namespace {
// FASTDYN_SEGV_BACKTRACE=1: a crash prints the native stack (the accelerator machine has no gdb).
void segv_backtrace(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

PYBIND11_MODULE(_C, m) {
  if (const char* bt = std::getenv("FASTDYN_SEGV_BACKTRACE"); bt && *bt == '1') signal(SIGSEGV, segv_backtrace);
  m.doc() = "fastdyn native core";
  eval_hook::init_code_extra();
  eval_hook::load_config_from_env();
  eval_hook::set_graph_break_raiser(raise_graph_break);
  py::register_exception<UserError>(m, "UserError", PyExc_ValueError);

#ifdef FASTDYN_HAVE_LLVM
  m.attr("has_llvm_cpu") = true;  // the llvm_cpu backend is built in ("native" uses it)
  m.def("kernels_emitted", &codegen::kernels_emitted);  // LLVM modules emitted by this process (tests)
#else
  m.attr("has_llvm_cpu") = false;
#endif
  m.def("enable", [](const std::string& backend, bool fullgraph, py::object dynamic, py::object mode) {
    const eval_hook::Target t{parse_backend(backend), parse_mode(mode)};
    const symbolic::DynamicMode d = parse_dynamic(dynamic);
    if (!g_enabled) eval_hook::install();
    else eval_hook::reassert();
    g_enabled = true;
    eval_hook::set_process_mode(eval_hook::Request{eval_hook::Mode::Compile, fullgraph, t, d});
  }, py::arg("backend") = "native", py::arg("fullgraph") = false, py::arg("dynamic") = py::none(),
     py::arg("mode") = py::none());
  m.def("disable", [] {
    eval_hook::set_process_mode(eval_hook::Request{});
    if (g_enabled) eval_hook::uninstall();
    g_enabled = false;
  });
  m.def("is_enabled", [] { return g_enabled; });
  m.def("hook_installed", [] { return eval_hook::installed(); });
  m.def("jit", [](py::handle fn, const std::string& backend, bool fullgraph, py::object dynamic, py::object mode) {
    const eval_hook::Target t{parse_backend(backend), parse_mode(mode)};
    PyObject* w = pymodule::make_jit_function(fn.ptr(), eval_hook::Request{eval_hook::Mode::Compile, fullgraph, t, parse_dynamic(dynamic)});
    if (!w) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(w);
  }, py::arg("fn"), py::arg("backend") = "native", py::arg("fullgraph") = false, py::arg("dynamic") = py::none(),
     py::arg("mode") = py::none());
  // FASTDYN_LOG=code events from Python (the CUDA graph runner).
  m.def("log_code", [](const std::string& message) {
    if (eval_hook::config().log_code) eval_hook::log_event("code", message);
  });
  m.def("jit_target", [](py::handle obj) -> py::object {
    PyObject* t = pymodule::jit_function_target(obj.ptr());
    return t ? py::reinterpret_borrow<py::object>(t) : py::none();
  });
  m.def("explain", &explain);
  // The report's journal (runtime/journal.h; python/fastdyn/report.py reads it).
  m.def("journal_on", [](bool on) { runtime::journal::set_on(on); });
  m.def("journal_is_on", [] { return runtime::journal::on(); });
  m.def("journal_clear", [] { runtime::journal::clear(); });
  m.def("journal_events", [] {
    size_t dropped = 0;
    std::vector<runtime::journal::Event> events;
    {
      py::gil_scoped_release release;  // it waits for the journal's deferred events
      events = runtime::journal::snapshot(&dropped);
    }
    py::list out;
    for (const runtime::journal::Event& e : events) {
      py::dict fields;
      for (const auto& [k, v] : e.fields) {
        PyObject* text = PyUnicode_DecodeUTF8(v.data(), static_cast<Py_ssize_t>(v.size()), "replace");
        if (!text) throw py::error_already_set();
        fields[py::str(k)] = py::reinterpret_steal<py::object>(text);
      }
      out.append(py::make_tuple(e.graph, e.kind, fields, e.ms));
    }
    return py::make_tuple(out, dropped);
  });
  // The report's graph picture (codegen/graph/graph_picture.h): (svg, ops not drawn, ops).
  m.def("graph_svg", [](std::string graph_text, std::vector<std::string> input_sources,
                        std::vector<std::string> node_locations,
                        std::vector<std::tuple<std::string, std::vector<int64_t>, bool>> kernels, int64_t node_cap,
                        std::string code_id, std::string entry, std::string marker_id) {
    codegen::picture::Request r{std::move(graph_text), std::move(input_sources), std::move(node_locations), {},
                                node_cap, std::move(code_id), std::move(entry), std::move(marker_id)};
    for (auto& [name, values, diverged] : kernels) r.kernels.push_back({std::move(name), std::move(values), diverged});
    codegen::picture::Picture p;
    {
      py::gil_scoped_release release;
      p = codegen::picture::draw(r);
    }
    return py::make_tuple(std::move(p.svg), p.ops_left_out, p.ops);
  });
  m.def("graph_picture_box", [] { return py::make_tuple(codegen::picture::kNodeWidth, codegen::picture::kNodeHeight); });
  m.def("graph_structure", &pymodule::graph_structure);  // explain()'s graph text as data (FX export)
  // Python's atexit: the background worker and the engine's prewarm thread end before static
  // destructors run (a running compile finishes; queued ones are dropped).
  m.def("shutdown_threads", [] {
    py::gil_scoped_release release;
    runtime::shutdown_background_compiler();
    runtime::journal::shutdown();  // after the worker: what its last task recorded is made here
#ifdef FASTDYN_HAVE_LLVM
    codegen::llvm_jit::finish_prewarm();
#endif
  });
  m.def("synchronize", [] {
    py::gil_scoped_release release;
    runtime::wait_background_idle();
  });
  m.def("set_background_compile", [](bool on) { eval_hook::config().background_compile = on; });
  m.def("background_compile", [] { return eval_hook::config().background_compile; });
  m.def("stats", &stats);
  m.def("set_strict", [](bool on) { eval_hook::config().strict = on; });
  m.def("strict", [] { return eval_hook::config().strict; });
  m.def("_test_inject_backend_failure", [](bool on) { eval_hook::config().test_fail_backend = on; });
  m.def("_test_inject_run_failures", [](int runs) { runtime::test_fail_graph_runs(runs); });
  m.def("set_compile_tensor_free", [](bool on) { eval_hook::config().compile_tensor_free = on; });
  m.def("reset", [] {
    {
      py::gil_scoped_release release;  // compiles in flight finish first: stats start from zero
      runtime::wait_background_idle();
    }
    runtime::reset_background_stats();
    eval_hook::reset_all_code_states();
    symbolic::forget_decoded();
    eval_hook::stats() = eval_hook::Stats();
    eval_hook::backend_failures() = 0;
#ifdef FASTDYN_HAVE_LLVM
    if (kernel_cache_in_use()) g_kernel_stats_at_reset = codegen::llvm_jit::cache_stats();
#endif
  });
  m.def("mark_skip", [](py::handle fn) { eval_hook::mark_skip(code_of(fn)); });
  m.def("set_path_rules", &eval_hook::set_path_rules, py::arg("skip"), py::arg("keep"), py::arg("native_only") = std::vector<std::string>{});
  m.def("set_graph_break_error", [](py::handle cls) {
    Py_XDECREF(g_graph_break_error);
    g_graph_break_error = Py_NewRef(cls.ptr());
  });
  m.def("set_recompile_limit", [](int n) {
    if (n < 0) throw py::value_error("fastdyn: recompile_limit must be >= 0");
    eval_hook::config().recompile_limit = n;
  });
  m.def("recompile_limit", [] { return eval_hook::config().recompile_limit; });
  m.def("disassemble", [](py::handle fn) { return symbolic::disassemble(code_of(fn)); });
  m.def("cache_size", [](py::handle fn) -> int {
    eval_hook::CodeState* st = eval_hook::code_state(code_of(fn));
    if (!st || st == eval_hook::skip_marker()) return 0;
    return static_cast<int>(st->entries.size());
  });
  // The guard check alone, as the hook runs it (bench/dynamic_overhead.py): fn's arguments as
  // its frame's first local slots, the newest entry whose guards hold for them checked
  // `iterations` times; seconds per check. None when no entry holds (or fn takes more than
  // positional arguments, whose slots this does not fill).
  m.def("guard_check_seconds", [](py::handle fn, py::tuple args, int iterations) -> py::object {
    PyCodeObject* code = code_of(fn);
    eval_hook::CodeState* st = eval_hook::code_state(code);
    if (!st || st == eval_hook::skip_marker() || !PyFunction_Check(fn.ptr()) || iterations < 1) return py::none();
    std::vector<PyObject*> slots(static_cast<size_t>(code->co_nlocalsplus), nullptr);
    if (args.size() > slots.size()) return py::none();
    for (size_t i = 0; i < args.size(); ++i) slots[i] = args[i].ptr();
    runtime::GuardFrame gf;
    gf.fast_locals = slots.data();
    gf.globals = PyFunction_GET_GLOBALS(fn.ptr());
    gf.builtins = PyDict_GetItemString(gf.globals, "__builtins__");
    if (gf.builtins && PyModule_Check(gf.builtins)) gf.builtins = PyModule_GetDict(gf.builtins);
    gf.closure = PyFunction_GET_CLOSURE(fn.ptr());
    for (const auto& entry : st->entries) {
      if (!entry->guards->check(gf)) continue;
      const auto t0 = std::chrono::steady_clock::now();
      bool ok = true;
      for (int i = 0; i < iterations; ++i) ok &= entry->guards->check(gf);
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (!ok) return py::none();
      return py::float_(dt.count() / iterations);
    }
    return py::none();
  });
  m.def("transformed_code", [](py::handle fn) -> py::object {
    eval_hook::CodeState* st = eval_hook::code_state(code_of(fn));
    if (!st || st == eval_hook::skip_marker() || st->entries.empty()) return py::none();
    return py::reinterpret_borrow<py::object>(PyFunction_GET_CODE(st->entries.front()->fn));
  });
  // What the backend runs for fn's newest entry now (a tiered graph says whether its kernels
  // have taken over); None when fn has no compiled entry.
  m.def("code_text", [](py::handle fn) -> py::object {
    eval_hook::CodeState* st = eval_hook::code_state(code_of(fn));
    if (!st || st == eval_hook::skip_marker() || st->entries.empty()) return py::none();
    const runtime::Executable* exe = runtime::compiled_graph_executable(st->entries.front()->graph);
    if (!exe) return py::none();
    return py::str(exe->describe());
  });
  // Whether the hook reads co_extra without calling libpython (checked at import; see
  // eval_hook/cpython_compat.h). Tests demand it on every supported Python.
  m.def("hook_reads_code_extra_directly", [] { return eval_hook::code_state_reads_directly(); });
  m.def("hold_background_for_testing", [](bool hold) { runtime::hold_background_for_testing(hold); });
  // The cuda backend's toolchain (runtime/cuda/cuda_api.h): NVRTC and the driver, loaded on demand.
  m.def("cuda_add_library_dir", [](const std::string& dir) { runtime::cuda::add_library_dir(dir); });
  m.def("cuda_info", [] {
    py::dict d;
    d["nvrtc"] = runtime::cuda::nvrtc_available();
    d["nvrtc_version"] = runtime::cuda::nvrtc_version();
    d["nvrtc_origin"] = runtime::cuda::nvrtc_origin();
    d["driver"] = runtime::cuda::driver_available();
    const codegen::CudaCompileStats k = codegen::cuda_compile_stats();
    d["kernels_compiled"] = k.compiled;     // NVRTC compiles (neither cache had the kernel)
    d["memory_hits"] = k.memory_hits;
    d["disk_hits"] = k.disk_hits;
    d["compile_ms"] = k.compile_ms;         // NVRTC time, summed over kernels
    return d;
  });
  // Around each CUDA graph capture (python/fastdyn/_cuda_graphs.py): kernels unloaded meanwhile wait.
  m.def("cuda_begin_graph_capture", [] { runtime::cuda::begin_graph_capture(); });
  m.def("cuda_end_graph_capture", [] { runtime::cuda::end_graph_capture(); });
  m.def(
      "cuda_route_timings",
      [](const std::vector<std::string>& extra) {
        py::list out;
        for (const codegen::RouteTiming& t : codegen::cuda_route_timings(extra))
          out.append(py::make_tuple(t.nvrtc_cubin_ms, t.nvrtc_ptx_ms, t.driver_ptx_load_ms, t.driver_cubin_load_ms));
        return out;
      },
      py::arg("extra_options") = std::vector<std::string>{});
  m.def("cuda_nvrtc_options", [] { return runtime::cuda::nvrtc_options(); });
  m.def("cuda_compiled_sources", [] { return codegen::cuda_compiled_sources(); });
  m.def(  // NVRTC's image (CUBIN or PTX) of a source for sm_<arch>, the backend's options then `extra`
      "cuda_nvrtc_compile",
      [](const std::string& source, int arch, bool cubin, const std::vector<std::string>& extra) {
        std::string image;
        {
          py::gil_scoped_release release;
          image = runtime::cuda::nvrtc_compile(source, "measure.cu", arch, cubin, extra);
        }
        return py::bytes(image);
      },
      py::arg("source"), py::arg("arch"), py::arg("cubin") = true, py::arg("extra_options") = std::vector<std::string>{});
  m.def("autocast_policies", [] {  // codegen/capture/autocast.cpp's table (tests/python/test_autocast.py)
    py::list out;
    for (size_t i = 0; i < static_cast<size_t>(codegen::OpId::kCount); ++i) {
      const auto op = static_cast<codegen::OpId>(i);
      const std::string cpu = codegen::autocast::policy_name(op, c10::DeviceType::CPU);
      const std::string cuda = codegen::autocast::policy_name(op, c10::DeviceType::CUDA);
      if (!cpu.empty() || !cuda.empty()) out.append(py::make_tuple(codegen::qualified_name(op), cpu, cuda));
    }
    return out;
  });
  m.def("differentiable_ops", [] {  // the derivative table's rows (tests/python/test_autograd_sweep.py)
    py::list out;
    for (codegen::OpId op : codegen::autograd::differentiable_ops()) out.append(codegen::qualified_name(op));
    return out;
  });
  m.def("graph_text", [](py::handle fn) -> py::object {
    eval_hook::CodeState* st = eval_hook::code_state(code_of(fn));
    if (!st || st == eval_hook::skip_marker() || st->entries.empty()) return py::none();
    return py::str(st->entries.front()->graph_text);
  });
  pymodule::bind_check(m);  // accuracy mode: set_check, check_divergences... (check_bindings.h)
}
