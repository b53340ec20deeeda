// symbolic/bytecode.h — decoding a code object's bytecode into instructions, and a readable
// disassembly for golden tests.
//
// Inline CACHE entries are skipped and EXTENDED_ARG prefixes folded into the following
// instruction's argument, so an Instruction is exactly what the interpreter executes.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

namespace fastdyn::symbolic {

struct Instruction {
  int index = 0;       // code-unit index of the opcode (after any EXTENDED_ARG prefix)
  int start = 0;       // code-unit index of the first EXTENDED_ARG prefix (== index if none)
  uint8_t opcode = 0;
  int arg = 0;
  int line = -1;       // source line, -1 when none
  int next = 0;        // code-unit index of the next instruction (after inline caches)
};

// One entry of a 3.11+ exception table, in code units: [start, end) handled at `target`.
struct ExceptionEntry {
  int start = 0, end = 0, target = 0, depth = 0;
  bool lasti = false;
};
std::vector<ExceptionEntry> exception_table(PyCodeObject* code);
// The entries around code unit `unit`, innermost first: the one covering it, then the one
// covering that handler's cleanup, and so on (CPython's ranges do not overlap: an outer with
// block covers the inner block's cleanup, not the instruction). At most 32.
std::vector<ExceptionEntry> enclosing_handlers(PyCodeObject* code, int unit);

// The instruction (an index into `insts`) that begins the outermost loop around instruction
// `inst`: the target of a backward jump from below it to at or above it; -1 outside loops.
int outermost_loop_head(const std::vector<Instruction>& insts, int inst);

// The instruction (an index into `insts`) that starts at code unit `unit` (its EXTENDED_ARG
// prefix or its opcode), or -1: where a jump lands.
int instruction_at(const std::vector<Instruction>& insts, int unit);
// The code unit a relative jump `in` lands on (forward, or backward for a kJumpBackward opcode).
int jump_target(const Instruction& in);

// Decodes `code` (borrowed). Never throws on well-formed code; raises InternalError otherwise.
// Memoized per code object (code is immutable, and a first call decodes the same functions many
// times: each inlined layer's forward, the re-trace up to a break, continuations); a copy of an
// earlier decode costs one allocation, against a walk of the code and its location table. Needs the GIL.
std::vector<Instruction> decode(PyCodeObject* code);

// The source line of each of the code's first n_units code units (-1: none), from its location
// table in one pass; empty if the table does not parse (decode then asks PyCode_Addr2Line).
std::vector<int> unit_lines(PyCodeObject* code, int n_units);

// Drops the memo and the references it holds (fastdyn.reset()).
void forget_decoded();

// One line per instruction: "  L+2   12 LOAD_FAST        0 (x)". Lines are relative to
// co_firstlineno so that goldens survive edits above the function.
std::string disassemble(PyCodeObject* code);

}  // namespace fastdyn::symbolic
