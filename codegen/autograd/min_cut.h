// codegen/autograd/min_cut.h — a minimum s-t cut of a small directed network (Dinic's max flow),
// for the partition's choice of what the forward saves (joint.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace fastdyn::codegen::autograd {

class FlowNetwork {
 public:
  static constexpr int64_t kInfinite = int64_t{1} << 60;  // an edge no cut may cross

  explicit FlowNetwork(int vertices);
  void add_edge(int from, int to, int64_t capacity);
  // The maximum flow from s to t (= the capacity of a minimum cut), at most kInfinite.
  int64_t max_flow(int s, int t);
  // After max_flow: the vertices s still reaches through edges with capacity left (the source side
  // of the minimum cut closest to s).
  std::vector<bool> source_side(int s) const;

 private:
  struct Edge {
    int to;
    int64_t left;  // capacity not yet used
  };
  bool levels_from(int s, int t);
  int64_t push(int v, int t, int64_t limit);
  std::vector<Edge> edges_;             // edge 2k and its reverse 2k + 1
  std::vector<std::vector<int>> out_;   // per vertex: indices into edges_
  std::vector<int> level_, next_;
};

}  // namespace fastdyn::codegen::autograd
