// symbolic/opcodes.h — the target interpreter's opcodes, from the table generated at build time
// (symbolic/gen_opcode_table.py -> opcode_table.inc). Names and numbers come from the Python
// fastdyn is built for; an opcode that version lacks is simply absent from the enum, and code
// that needs it tests FD_PY_MINOR.
#pragma once
#include <cstdint>
#include <string>

namespace fastdyn::symbolic {

enum OpcodeFlags : uint32_t {
  kHasConst = 1u << 0,
  kHasName = 1u << 1,
  kHasLocal = 1u << 2,
  kHasFree = 1u << 3,
  kHasCompare = 1u << 4,
  kJumpRelative = 1u << 5,
  kJumpAbsolute = 1u << 6,
  kJumpBackward = 1u << 7,
};

namespace op {
enum Opcode : uint8_t {
#define FD_OPCODE(name, num, caches, flags) name = num,
#include "opcode_table.inc"
};
}  // namespace op

struct OpcodeInfo {
  const char* name = nullptr;  // nullptr: not an opcode of this Python
  uint8_t cache_entries = 0;
  uint32_t flags = 0;
};

const OpcodeInfo& opcode_info(uint8_t opcode);
// The symbol of BINARY_OP's oparg ("+", "+=", "@"...), COMPARE_OP's ("<", "=="...); nullptr if
// out of range.
const char* binary_op_symbol(int oparg);
const char* compare_op_symbol(int index);
int python_minor();  // 11 or 12
// The forward twin of a backward conditional jump (3.11's POP_JUMP_BACKWARD_IF_TRUE ->
// POP_JUMP_FORWARD_IF_TRUE), or -1: a graph break at the test of a while loop jumps forward
// to its continuations.
int forward_twin(uint8_t opcode);

}  // namespace fastdyn::symbolic
