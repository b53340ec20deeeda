// symbolic/opcodes.cpp — lookup tables over the generated opcode list.
#include "symbolic/opcodes.h"

#include <array>

namespace fastdyn::symbolic {
namespace {

std::array<OpcodeInfo, 256> build_table() {
  std::array<OpcodeInfo, 256> t{};
#define FD_OPCODE(name, num, caches, fl) t[num] = OpcodeInfo{#name, static_cast<uint8_t>(caches), static_cast<uint32_t>(fl)};
#include "opcode_table.inc"
  return t;
}

constexpr const char* kBinaryOps[] = {
#define FD_BINARY_OP(i, sym) sym,
#include "opcode_table.inc"
};

constexpr const char* kCompareOps[] = {
#define FD_COMPARE_OP(i, sym) sym,
#include "opcode_table.inc"
};

}  // namespace

const OpcodeInfo& opcode_info(uint8_t opcode) {
  static const std::array<OpcodeInfo, 256> table = build_table();
  return table[opcode];
}

const char* binary_op_symbol(int oparg) {
  constexpr int n = sizeof(kBinaryOps) / sizeof(kBinaryOps[0]);
  return oparg >= 0 && oparg < n ? kBinaryOps[oparg] : nullptr;
}

const char* compare_op_symbol(int index) {
  constexpr int n = sizeof(kCompareOps) / sizeof(kCompareOps[0]);
  return index >= 0 && index < n ? kCompareOps[index] : nullptr;
}

int python_minor() { return FD_PY_MINOR; }

int forward_twin(uint8_t opcode) {
  const char* name = opcode_info(opcode).name;
  static const std::string backward = "POP_JUMP_BACKWARD_";
  if (!name || std::string(name).rfind(backward, 0) != 0) return -1;
  const std::string twin = "POP_JUMP_FORWARD_" + std::string(name).substr(backward.size());
  for (int i = 0; i < 256; ++i)
    if (opcode_info(static_cast<uint8_t>(i)).name && twin == opcode_info(static_cast<uint8_t>(i)).name) return i;
  return -1;
}

}  // namespace fastdyn::symbolic
