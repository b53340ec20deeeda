// runtime/dynamic_executable.cpp — see dynamic_executable.h.
#include "runtime/dynamic_executable.h"

#include <algorithm>

#include "runtime/errors.h"
#include "runtime/journal.h"

namespace fastdyn::runtime {

DynamicExecutable::DynamicExecutable(std::vector<Symbol> symbols, Instantiate instantiate, std::string program, size_t max_sizes)
    : symbols_(std::move(symbols)), instantiate_(std::move(instantiate)), program_(std::move(program)), max_sizes_(std::max<size_t>(max_sizes, 1)),
      journal_graph_(journal::current()) {}

ExecutablePtr DynamicExecutable::find_or_build(const Binding& b) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!lru_.empty() && lru_.front().sizes == b) return lru_.front().exe;  // the same sizes again
  auto it = index_.find(b);
  if (it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return lru_.front().exe;
  }
  // NB: compiled under the lock: two threads meeting a new size at once compile it once.
  // The report shows the kernels of the first sizes met (every later size has the same kernels).
  journal::Scope scope(built_ == 0 ? journal_graph_ : -1);
  ExecutablePtr exe = instantiate_(b);
  if (!exe) throw InternalError("dynamic executable: instantiating sizes failed");
  ++built_;
  lru_.push_front(Slot{b, exe});
  index_[b] = lru_.begin();
  if (lru_.size() > max_sizes_) {
    index_.erase(lru_.back().sizes);
    lru_.pop_back();
  }
  return exe;
}

std::vector<at::Tensor> DynamicExecutable::run(const std::vector<at::Tensor>& inputs) {
  Binding b;
  b.reserve(symbols_.size());
  for (const Symbol& s : symbols_) b.push_back(inputs.at(static_cast<size_t>(s.input)).size(s.dim));
  return find_or_build(b)->run(inputs);
}

std::vector<at::Tensor> DynamicExecutable::run_taking(std::vector<at::Tensor>&& inputs) {
  Binding b;
  b.reserve(symbols_.size());
  for (const Symbol& s : symbols_) b.push_back(inputs.at(static_cast<size_t>(s.input)).size(s.dim));
  return find_or_build(b)->run_taking(std::move(inputs));
}

std::string DynamicExecutable::describe() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string s = program_;
  s += "sizes compiled: " + std::to_string(built_) + " (kept: " + std::to_string(lru_.size()) + ")\n";
  if (!lru_.empty()) {
    s += "at the most recent sizes [";
    for (size_t i = 0; i < lru_.front().sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(lru_.front().sizes[i]);
    s += "]:\n" + lru_.front().exe->describe();
  }
  return s;
}

size_t DynamicExecutable::instantiated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return built_;
}

}  // namespace fastdyn::runtime
