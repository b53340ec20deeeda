// runtime/background_compiler.h — one worker thread that compiles off the caller's thread.
//
// Tiered compilation (tiered_executable.h) hands the slow part of a compile (LLVM's optimisation
// and code generation) to this worker, so that the call which traced a graph does not wait for it.
// Tasks run one at a time, newest first, on a std::thread started on first use: the newest task
// compiles the graph the program runs now, while an older queued one may serve a graph that ran
// once (a prefill) or that a later compile replaced (the static entry automatic dynamic made
// symbolic one call later); each executable runs on its baseline tier until its own task has run.
// In a generate() loop every step queues one task for its new length, and newest first builds the
// decode kernels they all share first: the first generate of a 2-layer Llama from a cold cache took
// 0.34-0.46 s against 0.40-0.55 s in submission order (3 fresh processes each). A task must
// not touch Python (the worker never holds the GIL) and should not throw: an exception escaping a
// task is swallowed (the task is expected to report its own failures).
//
// Process life:
// - fork(): a pthread_atfork handler waits until the queue is empty and the worker idle, and
//   holds the queue lock across the fork, so a child never inherits a half-done compile or a
//   locked LLVM engine; the child starts a fresh worker on its next submit.
// - exit: shutdown_background_compiler() (Python's atexit calls it, before static destructors)
//   lets the running task finish, drops the queued ones and joins the worker; submits after that
//   are refused, and the executables that asked keep their baseline tier.
#pragma once
#include <cstdint>
#include <functional>

namespace fastdyn::runtime {

using BackgroundTask = std::function<void()>;

// Queues `task`. Returns false, without running it, after shutdown_background_compiler().
bool submit_background(BackgroundTask task);

// Blocks until every task queued so far has finished (fastdyn.synchronize(), reset, tests).
// The caller must not hold a lock a task needs (e.g. call it with the GIL released).
void wait_background_idle();

// Finishes the running task, drops queued ones, joins the worker. Idempotent.
void shutdown_background_compiler();

// Tests only: while held, the worker starts no new task (the running one finishes), so a test can
// see a tiered executable before its optimised tier exists, deterministically. While held,
// wait_background_idle() waits only for the running task.
void hold_background_for_testing(bool hold);

// Lowers the calling thread below the user's threads (nice 10) and names it (top -H, /proc):
// the compile worker, and the LLVM engine's prewarm thread, whose work only speeds up later calls.
void run_below_user_threads(const char* name);

struct BackgroundStats {
  int64_t pending = 0;    // queued or running
  int64_t finished = 0;   // tasks run to the end (including ones that reported a failure)
  double seconds = 0.0;   // wall time the worker spent in tasks
};
BackgroundStats background_stats();
void reset_background_stats();  // finished and seconds back to 0 (fastdyn.reset())

}  // namespace fastdyn::runtime
