// codegen/graph/source_location.h — the Python lines graph nodes came from (Node::loc), for the
// report: "file.py:12" strings interned once per process, named by a small integer so that a
// node carries four bytes through every pass that copies it. Thread-safe; used only while the
// report's journal is on (the tracer stamps nodes then), so it costs nothing otherwise.
#pragma once
#include <cstdint>
#include <string>

namespace fastdyn::codegen {

int32_t intern_location(const std::string& file, int line);
// "file.py:12", or "" for -1 or an unknown id.
std::string location_text(int32_t loc);

}  // namespace fastdyn::codegen
