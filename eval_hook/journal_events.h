// eval_hook/journal_events.h — what the hook tells the report's journal (runtime/journal.h):
// per code object its compiled entries, graph breaks, recompiles (the guard that failed) and the
// recompile-limit warning. Each call does nothing while the journal is off; python/fastdyn/_report.py
// reads the fields by name.
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>

#include "codegen/backends/backend_id.h"
#include "eval_hook/compiler.h"

namespace fastdyn::eval_hook::journal_events {

// A compiled entry: its graph, where each op came from, inputs, guards and program. `graph` is the
// journal graph id its compile ran under; start_ms and ms when it started and how long it took.
void entry(PyCodeObject* code, int index, const CompileOutcome& out, codegen::Backend requested, int32_t graph,
           double start_ms, double ms);
void graph_break(PyCodeObject* code, const CompileOutcome& out);
// A miss that compiles entry `index`: `failed_guard` is the newest entry's guard that failed.
void recompile(PyCodeObject* code, int index, const std::string& failed_guard);
void recompile_limit(PyCodeObject* code, const std::string& warning);

}  // namespace fastdyn::eval_hook::journal_events
