// runtime/graph_calls.h — the compiled-graph calls of this thread, as the eval hook needs to see
// them to decide whether a frame whose graph raised may be redone eagerly (runtime/ layer, no
// CPython: the program executor asks it too).
#pragma once
#include <cstdint>

namespace fastdyn::runtime {

// Calls of compiled graphs on this thread, numbered from 1, and the number of the last that
// raised: the hook asks whether the failing call was its entry's own graph, the first call its
// transformed code makes (not a graph of a frame it called, the same code's included).
uint64_t begin_graph_call();  // compiled_graph.cpp: a call starts; returns its number
void note_failed_graph_call(uint64_t call);
uint64_t graph_calls();
uint64_t failed_graph_call();

// A graph that writes into its inputs cannot be redone after it raised, unless it raised before
// writing: a compiled program writes the mutated inputs last. The hook names the call it would
// redo then (0: none; returns the previous value, to restore); a program that fails before its
// writes in that call says so (note_failed_untouched) instead of replaying its ops on ATen, which
// would write, then raise.
uint64_t redo_if_untouched(uint64_t call);
bool redo_if_untouched_expected();  // for the graph call running now
void note_failed_untouched();
uint64_t failed_untouched_call();   // the last call that failed with its inputs untouched

// A graph call that failed with fastdyn's own error (InternalError or BackendError from the
// executable: a compiler bug, not an op's error that eager would raise too). The hook does not
// let a redo of the frame hide it: it counts a backend failure, and strict mode raises it.
void note_fastdyn_failure(uint64_t call);
uint64_t fastdyn_failed_call();

}  // namespace fastdyn::runtime
