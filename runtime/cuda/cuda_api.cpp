// runtime/cuda/cuda_api.cpp — see cuda_api.h.
#include "runtime/cuda/cuda_api.h"

#include <dirent.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "runtime/errors.h"

namespace fastdyn::runtime::cuda {
namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

// The entry points we use, by name, from the two libraries (null until bound; `ok` says all were).
// NB: the driver versions some entry points (_v2): these are the names its current ABI exports.
struct Driver {
  bool ok = false;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
};

struct Nvrtc {
  bool ok = false;
  std::string origin;
  nvrtcResult (*nvrtcVersion)(int*, int*) = nullptr;
  const char* (*nvrtcGetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*) = nullptr;
};

template <class F>
bool bind(void* lib, F*& f, const char* name) {
  f = reinterpret_cast<F*>(dlsym(lib, name));
  return f != nullptr;
}

std::mutex& dirs_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string>& dirs() {
  static std::vector<std::string> d;
  return d;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return r;
    bool ok = bind(lib, r.cuInit, "cuInit") && bind(lib, r.cuDeviceGet, "cuDeviceGet") &&
              bind(lib, r.cuDeviceGetCount, "cuDeviceGetCount") && bind(lib, r.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
              bind(lib, r.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
              bind(lib, r.cuCtxPushCurrent, "cuCtxPushCurrent_v2") && bind(lib, r.cuCtxPopCurrent, "cuCtxPopCurrent_v2") &&
              bind(lib, r.cuModuleLoadData, "cuModuleLoadData") && bind(lib, r.cuModuleUnload, "cuModuleUnload") &&
              bind(lib, r.cuModuleGetFunction, "cuModuleGetFunction") && bind(lib, r.cuLaunchKernel, "cuLaunchKernel") &&
              bind(lib, r.cuGetErrorString, "cuGetErrorString") && bind(lib, r.cuFuncSetAttribute, "cuFuncSetAttribute");
    int count = 0;
    r.ok = ok && r.cuInit(0) == 0 && r.cuDeviceGetCount(&count) == 0 && count > 0;
    return r;
  }();
  return d;
}

// NVRTC opens its builtins library (libnvrtc-builtins.so.<major>.<minor>) by name when it first
// compiles; outside the loader's path (a wheel's lib directory) it would not find it. Loading it
// first from NVRTC's own directory makes that lookup find the loaded copy.
void preload_builtins(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d))
    if (std::string(e->d_name).rfind("libnvrtc-builtins.so", 0) == 0) dlopen((dir + "/" + e->d_name).c_str(), RTLD_NOW | RTLD_GLOBAL);
  closedir(d);
}

void* open_nvrtc(std::string* origin) {
  static const char* const kNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  if (const char* path = std::getenv("FASTDYN_NVRTC"); path && *path) {
    *origin = path;
    const std::string p(path);
    if (p.find('/') != std::string::npos) preload_builtins(p.substr(0, p.rfind('/')));
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  std::vector<std::string> search;
  {
    std::lock_guard<std::mutex> lock(dirs_mutex());
    search = dirs();
  }
  for (const std::string& d : search)
    for (const char* n : kNames)
      if (void* lib = dlopen((d + "/" + n).c_str(), RTLD_NOW | RTLD_LOCAL)) {
        preload_builtins(d);
        *origin = d + "/" + n;
        return lib;
      }
  for (const char* n : kNames)
    if (void* lib = dlopen(n, RTLD_NOW | RTLD_LOCAL)) {
      *origin = n;
      return lib;
    }
  *origin = "not found (searched FASTDYN_NVRTC, the nvidia wheels' lib directories and the loader's path)";
  return nullptr;
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = [] {
    Nvrtc r;
    void* lib = open_nvrtc(&r.origin);
    if (!lib) return r;
    r.ok = bind(lib, r.nvrtcVersion, "nvrtcVersion") && bind(lib, r.nvrtcGetErrorString, "nvrtcGetErrorString") &&
           bind(lib, r.nvrtcCreateProgram, "nvrtcCreateProgram") && bind(lib, r.nvrtcDestroyProgram, "nvrtcDestroyProgram") &&
           bind(lib, r.nvrtcCompileProgram, "nvrtcCompileProgram") && bind(lib, r.nvrtcGetPTXSize, "nvrtcGetPTXSize") &&
           bind(lib, r.nvrtcGetPTX, "nvrtcGetPTX") && bind(lib, r.nvrtcGetCUBINSize, "nvrtcGetCUBINSize") &&
           bind(lib, r.nvrtcGetCUBIN, "nvrtcGetCUBIN") && bind(lib, r.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize") &&
           bind(lib, r.nvrtcGetProgramLog, "nvrtcGetProgramLog");
    if (!r.ok) r.origin += " (an entry point is missing)";
    return r;
  }();
  return n;
}

std::string driver_error(CUresult e) {
  const char* s = nullptr;
  if (driver().cuGetErrorString) driver().cuGetErrorString(e, &s);
  return s ? s : "CUDA error " + std::to_string(e);
}

void check(CUresult e, const char* what) {
  if (e != 0) throw BackendError(std::string("cuda backend: ") + what + ": " + driver_error(e));
}

const Driver& need_driver() {
  const Driver& d = driver();
  if (!d.ok) throw BackendError("cuda backend: the CUDA driver (libcuda.so.1) or a device is missing");
  return d;
}

// The primary context of `device`, retained once for the process (PyTorch's runtime API uses the
// same one).
CUcontext primary_context(int device) {
  static std::mutex m;
  static std::vector<CUcontext> contexts;
  std::lock_guard<std::mutex> lock(m);
  if (contexts.size() <= static_cast<size_t>(device)) contexts.resize(static_cast<size_t>(device) + 1, nullptr);
  CUcontext& c = contexts[static_cast<size_t>(device)];
  if (!c) {
    const Driver& d = need_driver();
    CUdevice dev = 0;
    check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
    check(d.cuDevicePrimaryCtxRetain(&c, dev), "cuDevicePrimaryCtxRetain");
  }
  return c;
}

// Makes `device`'s primary context current for the scope.
class ContextScope {
 public:
  explicit ContextScope(int device) { check(driver().cuCtxPushCurrent(primary_context(device)), "cuCtxPushCurrent"); }
  ~ContextScope() {
    CUcontext popped = nullptr;
    driver().cuCtxPopCurrent(&popped);
  }
};

}  // namespace

bool nvrtc_available() { return nvrtc().ok; }

std::string nvrtc_version() {
  if (!nvrtc().ok) return "";
  int major = 0, minor = 0;
  nvrtc().nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

bool driver_available() { return driver().ok; }

void add_library_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(dirs_mutex());
  for (const std::string& d : dirs())
    if (d == dir) return;
  dirs().push_back(dir);
}

std::string nvrtc_origin() { return nvrtc().origin; }

namespace {

// Whether this NVRTC takes `option` (older ones refuse options they do not know): one empty
// program compiled with it, once.
bool nvrtc_accepts(const char* option) {
  const Nvrtc& n = nvrtc();
  nvrtcProgram prog = nullptr;
  if (!n.ok || n.nvrtcCreateProgram(&prog, "extern \"C\" __global__ void k() {}\n", "probe.cu", 0, nullptr, nullptr) != 0)
    return false;
  const char* opts[] = {option};
  const bool ok = n.nvrtcCompileProgram(prog, 1, opts) == 0;
  n.nvrtcDestroyProgram(&prog);
  return ok;
}

}  // namespace

const std::vector<std::string>& nvrtc_options() {
  static const std::vector<std::string> options = [] {
    std::vector<std::string> o = {"--std=c++17", "-default-device"};
    if (nvrtc_accepts("-minimal")) o.push_back("-minimal");
    if (const char* extra = std::getenv("FASTDYN_NVRTC_OPTIONS")) {
      std::istringstream words(extra);
      for (std::string w; words >> w;) o.push_back(w);
    }
    return o;
  }();
  return options;
}

std::string nvrtc_compile(const std::string& source, const std::string& name, int arch, bool cubin,
                          const std::vector<std::string>& extra) {
  const Nvrtc& n = nvrtc();
  if (!n.ok) throw BackendError("cuda backend: NVRTC is missing: " + n.origin);
  nvrtcProgram prog = nullptr;
  if (nvrtcResult e = n.nvrtcCreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr); e != 0)
    throw BackendError(std::string("cuda backend: nvrtcCreateProgram: ") + n.nvrtcGetErrorString(e));
  struct Destroy {
    const Nvrtc& n;
    nvrtcProgram* p;
    ~Destroy() { n.nvrtcDestroyProgram(p); }
  } destroy{n, &prog};
  const std::string arch_opt = std::string("--gpu-architecture=") + (cubin ? "sm_" : "compute_") + std::to_string(arch);
  std::vector<const char*> opts = {arch_opt.c_str()};
  for (const std::string& o : nvrtc_options()) opts.push_back(o.c_str());
  for (const std::string& o : extra) opts.push_back(o.c_str());
  const nvrtcResult e = n.nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  if (e != 0) {
    size_t size = 0;
    n.nvrtcGetProgramLogSize(prog, &size);
    std::string log(size, '\0');
    if (size) n.nvrtcGetProgramLog(prog, log.data());
    throw BackendError("cuda backend: NVRTC failed on " + name + ": " + n.nvrtcGetErrorString(e) + "\n" + log);
  }
  size_t size = 0;
  std::string image;
  if (cubin) {
    n.nvrtcGetCUBINSize(prog, &size);
    image.resize(size);
    n.nvrtcGetCUBIN(prog, image.data());
  } else {
    n.nvrtcGetPTXSize(prog, &size);
    image.resize(size);
    n.nvrtcGetPTX(prog, image.data());
  }
  return image;
}

DeviceInfo device_info(int device) {
  const Driver& d = need_driver();
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  // CU_DEVICE_ATTRIBUTE_: MAX_THREADS_PER_BLOCK 1, MULTIPROCESSOR_COUNT 16, COMPUTE_CAPABILITY_MAJOR 75, _MINOR 76
  int major = 0, minor = 0;
  DeviceInfo info;
  check(d.cuDeviceGetAttribute(&major, 75, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&minor, 76, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&info.multiprocessors, 16, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&info.max_threads_per_block, 1, dev), "cuDeviceGetAttribute");
  info.arch = 10 * major + minor;
  return info;
}

LoadedKernel::LoadedKernel(const std::string& image, const std::string& symbol, int device) : device_(device) {
  const Driver& d = need_driver();
  ContextScope scope(device);
  check(d.cuModuleLoadData(&module_, image.data()), "cuModuleLoadData");
  if (CUresult e = d.cuModuleGetFunction(&fn_, module_, symbol.c_str()); e != 0) {
    d.cuModuleUnload(module_);
    check(e, "cuModuleGetFunction");
  }
}

namespace {
// Modules whose unload waits for the captures in progress to end (begin/end_graph_capture).
// NB: unloads run under the lock, so none overlaps a capture that begins meanwhile.
struct DeferredUnloads {
  std::mutex mutex;
  int captures = 0;
  std::vector<std::pair<CUmodule, int>> modules;  // (module, device)
};
DeferredUnloads& deferred_unloads() {
  static auto* d = new DeferredUnloads;  // NB: leaked: modules may be destroyed at exit
  return *d;
}
void unload(CUmodule module, int device) {
  ContextScope scope(device);
  driver().cuModuleUnload(module);
}
}  // namespace

void begin_graph_capture() {
  DeferredUnloads& d = deferred_unloads();
  std::lock_guard<std::mutex> lock(d.mutex);
  ++d.captures;
}

void end_graph_capture() {
  DeferredUnloads& d = deferred_unloads();
  std::lock_guard<std::mutex> lock(d.mutex);
  FD_CHECK(d.captures > 0, "end_graph_capture without begin_graph_capture");
  if (--d.captures > 0) return;
  for (const auto& [module, device] : d.modules) unload(module, device);
  d.modules.clear();
}

LoadedKernel::~LoadedKernel() {
  if (!module_ || !driver().ok) return;
  DeferredUnloads& d = deferred_unloads();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (d.captures > 0) {
    d.modules.emplace_back(module_, device_);
    return;
  }
  unload(module_, device_);
}

void launch(CUfunction fn, int64_t grid, int block, int shared_bytes, CUstream stream, void** params, int device) {
  const Driver& d = driver();
  // NB: PyTorch's stream belongs to the device's primary context; the calling thread's current
  // context may be another device's (or none, on a thread that never touched CUDA).
  ContextScope scope(device);
  check(d.cuLaunchKernel(fn, static_cast<unsigned>(grid), 1, 1, static_cast<unsigned>(block), 1, 1,
                         static_cast<unsigned>(shared_bytes), stream, params, nullptr),
        "cuLaunchKernel");
}

}  // namespace fastdyn::runtime::cuda
