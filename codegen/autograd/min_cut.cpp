// codegen/autograd/min_cut.cpp — see min_cut.h.
#include "codegen/autograd/min_cut.h"

#include <algorithm>
#include <queue>

namespace fastdyn::codegen::autograd {

FlowNetwork::FlowNetwork(int vertices) : out_(static_cast<size_t>(vertices)) {}

void FlowNetwork::add_edge(int from, int to, int64_t capacity) {
  out_[static_cast<size_t>(from)].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({to, std::min(capacity, kInfinite)});
  out_[static_cast<size_t>(to)].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({from, 0});
}

bool FlowNetwork::levels_from(int s, int t) {
  level_.assign(out_.size(), -1);
  std::queue<int> q;
  level_[static_cast<size_t>(s)] = 0;
  q.push(s);
  while (!q.empty()) {
    const int v = q.front();
    q.pop();
    for (int e : out_[static_cast<size_t>(v)]) {
      const Edge& ed = edges_[static_cast<size_t>(e)];
      if (ed.left > 0 && level_[static_cast<size_t>(ed.to)] < 0) {
        level_[static_cast<size_t>(ed.to)] = level_[static_cast<size_t>(v)] + 1;
        q.push(ed.to);
      }
    }
  }
  return level_[static_cast<size_t>(t)] >= 0;
}

int64_t FlowNetwork::push(int v, int t, int64_t limit) {
  if (v == t) return limit;
  for (int& i = next_[static_cast<size_t>(v)]; i < static_cast<int>(out_[static_cast<size_t>(v)].size()); ++i) {
    const int e = out_[static_cast<size_t>(v)][static_cast<size_t>(i)];
    Edge& ed = edges_[static_cast<size_t>(e)];
    if (ed.left <= 0 || level_[static_cast<size_t>(ed.to)] != level_[static_cast<size_t>(v)] + 1) continue;
    const int64_t got = push(ed.to, t, std::min(limit, ed.left));
    if (got > 0) {
      ed.left -= got;
      edges_[static_cast<size_t>(e ^ 1)].left += got;
      return got;
    }
  }
  return 0;
}

int64_t FlowNetwork::max_flow(int s, int t) {
  int64_t flow = 0;
  while (flow < kInfinite && levels_from(s, t)) {
    next_.assign(out_.size(), 0);
    while (int64_t got = push(s, t, kInfinite - flow)) {
      flow += got;
      if (flow >= kInfinite) break;
    }
  }
  return std::min(flow, kInfinite);
}

std::vector<bool> FlowNetwork::source_side(int s) const {
  std::vector<bool> seen(out_.size(), false);
  std::vector<int> todo{s};
  seen[static_cast<size_t>(s)] = true;
  while (!todo.empty()) {
    const int v = todo.back();
    todo.pop_back();
    for (int e : out_[static_cast<size_t>(v)]) {
      const Edge& ed = edges_[static_cast<size_t>(e)];
      if (ed.left > 0 && !seen[static_cast<size_t>(ed.to)]) {
        seen[static_cast<size_t>(ed.to)] = true;
        todo.push_back(ed.to);
      }
    }
  }
  return seen;
}

}  // namespace fastdyn::codegen::autograd
