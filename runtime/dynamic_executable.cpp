// runtime/dynamic_executable.cpp — see dynamic_executable.h.
#include "runtime/dynamic_executable.h"

#include <algorithm>
#include <iterator>

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
    // A pseudo-random victim among the others, not the least recently used: a generate() longer
    // than the bound meets its lengths in a cycle, where LRU evicts each one just before its next
    // use (400 tokens: every step re-planned at every generate, 0.32 s against 0.10 at 200).
    // Random replacement keeps about bound/cycle of them, and a working set within the bound
    // is never touched (deterministic: splitmix64 of a counter).
    uint64_t z = (evictions_++ + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    auto victim = std::next(lru_.begin(), 1 + static_cast<long>(z % (lru_.size() - 1)));
    index_.erase(victim->sizes);
    lru_.erase(victim);
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
