// runtime/background_compiler.h — the worker threads that compile off the caller's thread.
//
// Tiered compilation (tiered_executable.h) hands the slow part of a compile (LLVM's optimisation
// and code generation, NVRTC, the graph passes at a dynamic entry's new size) to these threads, so
// that the call which traced a graph does not wait for it. A task takes one thread; a thread is
// started when a task is queued while every started one is busy, up to background_threads() (a
// quarter of the usable CPUs, 1 to 4, or FASTDYN_COMPILE_THREADS): one on a 2-core machine. Each
// free thread takes the newest queued task: the newest task
// compiles the graph the program runs now, while an older queued one may serve a graph that ran
// once (a prefill) or that a later compile replaced (the static entry automatic dynamic made
// symbolic one call later); each executable runs on its baseline tier until its own task has run.
// In a generate() loop every step queues one task for its new length, and newest first builds the
// decode kernels they all share first: the first generate of a 2-layer Llama from a cold cache took
// 0.34-0.46 s against 0.40-0.55 s in submission order (3 fresh processes each). A task must
// not touch Python (the threads never hold the GIL) and should not throw: an exception escaping a
// task is swallowed (the task is expected to report its own failures). Tasks may run at the same
// time as each other and as a compile on the calling thread: what they share (the kernel caches,
// the LLVM engine, NVRTC's module table) is locked where it is kept.
//
// Process life:
// - fork(): a pthread_atfork handler waits until the queue is empty and every thread idle, and
//   holds the queue lock across the fork, so a child never inherits a half-done compile or a
//   locked LLVM engine; the child starts fresh threads on its next submits.
// - exit: shutdown_background_compiler() (Python's atexit calls it, before static destructors)
//   lets the running tasks finish, drops the queued ones and joins the threads; submits after that
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

// Finishes the running tasks, drops queued ones, joins the threads. Idempotent.
void shutdown_background_compiler();

// How many threads run tasks at most (see the top); setting it starts or stops none at once: a
// lower bound lets the extra threads idle, a higher one starts threads as tasks queue.
int background_threads();
void set_background_threads(int n);

// The CPUs this process may run on (its affinity mask: a container's share, not the host's).
int usable_cpus();

// Tests only: while held, no thread starts a new task (running ones finish), so a test can see a
// tiered executable before its optimised tier exists, deterministically. While held,
// wait_background_idle() waits only for the running tasks.
void hold_background_for_testing(bool hold);

// Lowers the calling thread below the user's threads (nice 10) and names it (top -H, /proc):
// the compile worker, and the LLVM engine's prewarm thread, whose work only speeds up later calls.
void run_below_user_threads(const char* name);

struct BackgroundStats {
  int64_t pending = 0;    // queued or running
  int64_t finished = 0;   // tasks run to the end (including ones that reported a failure)
  double seconds = 0.0;   // wall time the threads spent in tasks (summed over threads)
  int64_t threads = 0;    // threads started so far
};
BackgroundStats background_stats();
void reset_background_stats();  // finished and seconds back to 0 (fastdyn.reset())

}  // namespace fastdyn::runtime
