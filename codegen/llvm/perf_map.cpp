// codegen/llvm/perf_map.cpp — see perf_map.h.
#include "codegen/llvm/perf_map.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <llvm/Object/ObjectFile.h>
#include <llvm/Object/SymbolSize.h>
#include <llvm/Support/MemoryBuffer.h>

namespace fastdyn::codegen::llvm_jit {
namespace {
thread_local std::string t_label;
std::mutex g_file_mutex;
}  // namespace

bool perf_map_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("FASTDYN_PERF_MAP");
    return env && *env && std::string(env) != "0";
  }();
  return on;
}

void set_perf_label(std::string label) { t_label = std::move(label); }

void perf_map_record(const std::string& object, const std::function<void*(const std::string&)>& address_of) {
  if (!perf_map_enabled()) return;
  auto file = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(object, "fastdyn_kernel"));
  if (!file) {
    llvm::consumeError(file.takeError());
    return;
  }
  // Local functions (the loop bodies handed to fastdyn_parallel_for) cannot be looked up: place
  // them by their offset from an exported function of the same section.
  struct Fn {
    std::string name;
    uint64_t offset, size;
    llvm::object::section_iterator section;
  };
  std::vector<Fn> fns;
  for (const auto& [symbol, size] : llvm::object::computeSymbolSizes(**file)) {
    auto type = symbol.getType();
    auto name = symbol.getName();
    auto offset = symbol.getValue();
    auto section = symbol.getSection();
    if (type && name && offset && section && *type == llvm::object::SymbolRef::ST_Function && size > 0)
      fns.push_back({name->str(), *offset, size, *section});
    if (!type) llvm::consumeError(type.takeError());
    if (!name) llvm::consumeError(name.takeError());
    if (!offset) llvm::consumeError(offset.takeError());
    if (!section) llvm::consumeError(section.takeError());
  }
  std::string lines;
  for (const Fn& anchor : fns) {
    void* start = address_of(anchor.name);
    if (!start) continue;
    const auto base = reinterpret_cast<uintptr_t>(start) - anchor.offset;
    for (const Fn& f : fns) {
      if (f.section != anchor.section) continue;
      char head[64];
      std::snprintf(head, sizeof head, "%lx %lx ", static_cast<unsigned long>(base + f.offset), static_cast<unsigned long>(f.size));
      lines += head + (t_label.empty() ? std::string() : t_label + " ") + f.name + "\n";
    }
    break;
  }
  std::lock_guard<std::mutex> lock(g_file_mutex);
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fputs(lines.c_str(), f);
    std::fclose(f);
  }
}

}  // namespace fastdyn::codegen::llvm_jit
