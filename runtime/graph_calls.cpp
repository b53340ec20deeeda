// runtime/graph_calls.cpp — see graph_calls.h.
#include "runtime/graph_calls.h"

#include <utility>

namespace fastdyn::runtime {
namespace {
thread_local uint64_t t_graph_calls = 0;
thread_local uint64_t t_failed_call = 0;
thread_local uint64_t t_redo_call = 0;
thread_local uint64_t t_untouched_call = 0;
thread_local uint64_t t_fastdyn_failed_call = 0;
}  // namespace

uint64_t begin_graph_call() { return ++t_graph_calls; }
void note_failed_graph_call(uint64_t call) { t_failed_call = call; }
uint64_t graph_calls() { return t_graph_calls; }
uint64_t failed_graph_call() { return t_failed_call; }
uint64_t redo_if_untouched(uint64_t call) { return std::exchange(t_redo_call, call); }
bool redo_if_untouched_expected() { return t_redo_call != 0 && t_redo_call == t_graph_calls; }
void note_failed_untouched() { t_untouched_call = t_graph_calls; }
uint64_t failed_untouched_call() { return t_untouched_call; }
void note_fastdyn_failure(uint64_t call) { t_fastdyn_failed_call = call; }
uint64_t fastdyn_failed_call() { return t_fastdyn_failed_call; }

}  // namespace fastdyn::runtime
