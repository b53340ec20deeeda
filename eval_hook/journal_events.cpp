// eval_hook/journal_events.cpp — see journal_events.h.
#include "eval_hook/journal_events.h"

#include <utility>
#include <vector>

#include "codegen/backends/backends.h"
#include "eval_hook/config.h"
#include "runtime/journal.h"
#include "symbolic/continuation.h"

namespace fastdyn::eval_hook::journal_events {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string utf8(PyObject* s) {
  const char* c = s ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) PyErr_Clear();
  return c ? c : "?";
}

// Names the code object: the collector groups events by "code" and shows its source.
Fields code_fields(PyCodeObject* code) {
  return {{"code", std::to_string(reinterpret_cast<uintptr_t>(code))},
          {"qualname", utf8(code->co_qualname)},
          {"filename", utf8(code->co_filename)},
          {"firstlineno", std::to_string(code->co_firstlineno)},
          {"continuation", symbolic::is_resume_prologue(code, 0) ? "1" : "0"}};
}

// Items end with '\x1e' (ASCII's record separator): a guard's description may span lines.
std::string records(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& l : items) s += l + '\x1e';
  return s;
}

}  // namespace

void entry(PyCodeObject* code, int index, const CompileOutcome& out, codegen::Backend requested, int32_t graph,
           double start_ms, double ms) {
  if (!runtime::journal::on()) return;
  const CacheEntry& e = *out.entry;
  Fields f = code_fields(code);
  std::vector<std::string> guards;
  {
    ModeGuard off(Request{});  // describing a guard may run a user __repr__
    guards = e.guards->describe();
  }
  f.insert(f.end(), {{"entry", std::to_string(index)},
                     {"graph_text", e.graph_text},
                     {"input_sources", records(e.input_sources)},
                     {"node_locations", records(out.node_locations)},
                     {"guards", records(guards)},
                     {"program_text", e.code_text},
                     {"requested_backend", codegen::backend_name(requested)},
                     {"start_ms", std::to_string(start_ms)}});
  runtime::journal::Event ev;
  ev.graph = graph;
  ev.kind = "entry";
  ev.fields = std::move(f);
  ev.ms = ms;
  runtime::journal::add(std::move(ev));
}

void graph_break(PyCodeObject* code, const CompileOutcome& out) {
  if (!runtime::journal::on()) return;
  Fields f = code_fields(code);
  f.insert(f.end(), {{"reason", out.reason},
                     {"break_file", out.filename},
                     {"break_line", std::to_string(out.lineno)},
                     {"continued", out.broke ? "1" : "0"}});
  runtime::journal::add("break", std::move(f));
}

void recompile(PyCodeObject* code, int index, const std::string& failed_guard) {
  if (!runtime::journal::on()) return;
  Fields f = code_fields(code);
  f.insert(f.end(), {{"entry", std::to_string(index)}, {"guard", failed_guard}});
  runtime::journal::add("recompile", std::move(f));
}

void recompile_limit(PyCodeObject* code, const std::string& warning) {
  if (!runtime::journal::on()) return;
  Fields f = code_fields(code);
  f.emplace_back("text", warning);
  runtime::journal::add("limit", std::move(f));
}

}  // namespace fastdyn::eval_hook::journal_events
