// eval_hook/hook.h — the PEP 523 frame-evaluation hook.
//
// install()/uninstall() are reference counted (enable() and every live jit wrapper hold one);
// the first install saves the evaluator that was there before and every frame fastdyn does not
// take goes to it, so other PEP 523 users keep working. The hook itself: read this thread's
// mode, read the code's co_extra state (SKIP costs one pointer read), check cache entries'
// guards on the frame's fast locals, run the hit entry's transformed code in a fresh frame, or
// compile on a miss with the hook off for the thread.
#pragma once
#include <Python.h>

#include <string>

namespace fastdyn::eval_hook {

void install();
void uninstall();
// Puts the hook back where it is wanted (installed) but another PEP 523 user left the default
// evaluator in its place. One pointer comparison: jit wrappers call it on every call.
void reassert();
bool installed();  // wanted, and the interpreter's evaluator now

// Set by the hook when fullgraph=True and capture failed; the pymodule turns it into
// fastdyn.GraphBreakError. (A callback keeps the layer rule: eval_hook never imports pymodule.)
using GraphBreakRaiser = void (*)(const std::string& reason, const std::string& filename, int lineno);
void set_graph_break_raiser(GraphBreakRaiser fn);

// While set, every compile outcome is added to *r (fastdyn.explain runs the function once).
struct ExplainReport;
void set_explain_recorder(ExplainReport* r);
bool explain_recording();  // an explain() is running (its report wants each program at once)

}  // namespace fastdyn::eval_hook
