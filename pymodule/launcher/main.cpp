// pymodule/launcher/main.cpp — the native `fastdyn` executable (pymodule layer).
//
// `fastdyn run script.py [args...]` embeds the CPython interpreter that built it, imports fastdyn,
// calls fastdyn.enable(), then runs the script as __main__. It promises to be indistinguishable
// from `python script.py args...` apart from the JIT: the same sys.argv, sys.path[0],
// sys.executable, stdlib and site-packages, stdout/stderr, exit code and tracebacks.
//
// How: rather than re-implementing what python's main() does, we hand CPython the very command
// line `<python> script.py args...` through PyConfig (parse_argv=1) and let Py_RunMain run it.
// CPython then computes sys.argv, sys.path[0] and __file__, reports a missing script, handles
// SystemExit and prints uncaught exceptions exactly as python itself would, and no launcher
// frame can appear in a traceback because no launcher Python code runs the script. The only
// step we add is enabling fastdyn between Py_InitializeFromConfig and Py_RunMain.
//
// Build-time facts: FASTDYN_PYTHON_EXECUTABLE (that interpreter's sys.executable; it is also our
// program name, so the path calculation finds the same prefix, stdlib, site-packages and venv)
// and FASTDYN_VERSION (python/fastdyn/__init__.py's __version__). Both come from CMake.
//
// FASTDYN_DISABLE=1 (any value but empty or "0") runs the script without importing fastdyn, for
// A/B comparisons against the same launcher.
#include <Python.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef FASTDYN_PYTHON_EXECUTABLE
#error "FASTDYN_PYTHON_EXECUTABLE must name the interpreter fastdyn was built against"
#endif
#ifndef FASTDYN_VERSION
#error "FASTDYN_VERSION must be defined by the build"
#endif

namespace {

constexpr const char* kUsage =
    "usage: fastdyn run [--report out.html] [--] script.py [args...]\n"
    "       fastdyn --help | --version\n"
    "\n"
    "Runs script.py as __main__ under the Python that fastdyn was built with, exactly like\n"
    "`python script.py args...`, with the fastdyn JIT enabled (fastdyn.enable()).\n"
    "\n"
    "  --report out.html   write an HTML report of graphs, breaks, recompiles and kernels when\n"
    "                      the script exits (the same as FASTDYN_REPORT=out.html)\n"
    "\n"
    "environment:\n"
    "  FASTDYN_DISABLE=1   run the script without enabling fastdyn (for A/B comparisons)\n"
    "  FASTDYN_LOG=graph_breaks,recompiles,guards,graphs,code   diagnostics on stderr\n";

// Exit status for command-line misuse, as python uses for a bad option or a missing script.
constexpr int kUsageExit = 2;

int usage_error(const char* message) {
  if (message != nullptr) std::fprintf(stderr, "fastdyn: %s\n", message);
  std::fputs(kUsage, stderr);
  return kUsageExit;
}

bool disabled_by_env() {
  const char* value = std::getenv("FASTDYN_DISABLE");
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

// Prints a failed PyStatus from the embedding API and returns the exit code to use. An "exit"
// status (CPython asked to exit, e.g. after printing its own message) keeps its code.
int report_status(const char* what, const PyStatus& status) {
  if (PyStatus_IsExit(status)) return status.exitcode;
  std::fprintf(stderr, "fastdyn: %s (Python %s at %s): %s%s%s\n", what, PY_VERSION,
               FASTDYN_PYTHON_EXECUTABLE, status.func ? status.func : "",
               status.func ? ": " : "", status.err_msg ? status.err_msg : "unknown error");
  return 1;
}

// Arranges for fastdyn.enable() to run when the script first imports torch (fastdyn/_defer.py
// says why), loading _defer.py by path so that neither fastdyn nor torch is imported now. On
// failure the Python error is left set.
bool enable_fastdyn() {
  static const char* code =
      "import importlib.util as _u, os as _os\n"
      "_spec = _u.find_spec('fastdyn')\n"
      "if _spec is None or not _spec.submodule_search_locations:\n"
      "    raise ImportError('No module named fastdyn')\n"
      "_path = _os.path.join(list(_spec.submodule_search_locations)[0], '_defer.py')\n"
      "_d = _u.module_from_spec(_u.spec_from_file_location('fastdyn._defer', _path))\n"
      "_d.__spec__.loader.exec_module(_d)\n"
      "_d.install()\n";
  PyObject* globals = PyDict_New();
  if (globals == nullptr) return false;
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* result = PyRun_String(code, Py_file_input, globals, globals);  // new reference
  Py_DECREF(globals);
  if (result == nullptr) return false;
  Py_DECREF(result);
  return true;
}

// Configures the embedded interpreter as `<python> [--] script args...` would, then starts it.
PyStatus initialize(const std::vector<char*>& python_argv) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  // parse_argv is already 1: CPython parses python_argv like its own command line. Setting the
  // program name and executable to the build interpreter makes the path calculation (prefix,
  // stdlib, site-packages, pyvenv.cfg) and sys.executable those of that interpreter.
  PyStatus status =
      PyConfig_SetBytesString(&config, &config.program_name, FASTDYN_PYTHON_EXECUTABLE);
  if (!PyStatus_Exception(status))
    status = PyConfig_SetBytesString(&config, &config.executable, FASTDYN_PYTHON_EXECUTABLE);
  if (!PyStatus_Exception(status))
    status = PyConfig_SetBytesArgv(&config, static_cast<Py_ssize_t>(python_argv.size()),
                                   python_argv.data());
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  return status;
}

int run_script(const char* script, int argc, char** argv) {
  // The command line python would see: the interpreter, the script, its arguments. A script whose
  // name starts with '-' goes after "--" so that CPython cannot take it for an option.
  std::vector<char*> python_argv{const_cast<char*>(FASTDYN_PYTHON_EXECUTABLE)};
  if (script[0] == '-') python_argv.push_back(const_cast<char*>("--"));
  python_argv.push_back(const_cast<char*>(script));
  python_argv.insert(python_argv.end(), argv, argv + argc);

  PyStatus status = initialize(python_argv);
  if (PyStatus_Exception(status)) return report_status("cannot start Python", status);

  // A missing script is reported by Py_RunMain with python's own message and exit code 2; it
  // needs no JIT, and must not depend on fastdyn (or torch) importing.
  struct stat info;
  const bool script_exists = ::stat(script, &info) == 0;
  if (script_exists && !disabled_by_env() && !enable_fastdyn()) {
    std::fprintf(stderr,
                 "fastdyn: could not enable fastdyn (set FASTDYN_DISABLE=1 to run without it):\n");
    PyErr_Print();
    Py_FinalizeEx();
    return 1;
  }
  return Py_RunMain();  // runs the script, finalizes, returns python's exit code
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage_error(nullptr);
  const std::string command = argv[1];
  if (command == "-h" || command == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "-V" || command == "--version") {
    std::printf("fastdyn %s (Python %s, %s)\n", FASTDYN_VERSION, PY_VERSION,
                FASTDYN_PYTHON_EXECUTABLE);
    return 0;
  }
  if (command != "run") {
    const std::string message = "unknown command '" + command + "'";
    return usage_error(message.c_str());
  }

  int next = 2;  // argv index of the script
  // --report PATH (or --report=PATH): python/fastdyn/report.py reads FASTDYN_REPORT at import.
  if (next < argc && std::strncmp(argv[next], "--report", 8) == 0 && (argv[next][8] == '=' || argv[next][8] == 0)) {
    const char* path = argv[next][8] == '=' ? argv[next] + 9 : (next + 1 < argc ? argv[next + 1] : nullptr);
    if (path == nullptr || *path == 0) return usage_error("--report needs the report's file name");
    ::setenv("FASTDYN_REPORT", path, 1);
    next += argv[next][8] == '=' ? 1 : 2;
  }
  if (next < argc && std::strcmp(argv[next], "--") == 0) {
    ++next;
  } else if (next < argc && argv[next][0] == '-') {
    if (std::strcmp(argv[next], "-h") == 0 || std::strcmp(argv[next], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const std::string message = std::string("unknown option '") + argv[next] +
                                "' (options for the script go after its name)";
    return usage_error(message.c_str());
  }
  if (next >= argc) return usage_error("run: missing the script to run");
  return run_script(argv[next], argc - next - 1, argv + next + 1);
}
