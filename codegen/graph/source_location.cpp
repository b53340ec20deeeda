// codegen/graph/source_location.cpp — see source_location.h.
#include "codegen/graph/source_location.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace fastdyn::codegen {
namespace {

struct Table {
  std::mutex mu;
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> texts;
};

Table& table() {
  static Table* t = new Table();  // never destroyed: compile threads may read it during exit
  return *t;
}

}  // namespace

int32_t intern_location(const std::string& file, int line) {
  std::string text = file + ":" + std::to_string(line);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto [it, fresh] = t.ids.emplace(text, static_cast<int32_t>(t.texts.size()));
  if (fresh) t.texts.push_back(std::move(text));
  return it->second;
}

std::string location_text(int32_t loc) {
  if (loc < 0) return "";
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return static_cast<size_t>(loc) < t.texts.size() ? t.texts[static_cast<size_t>(loc)] : "";
}

}  // namespace fastdyn::codegen
