// Cache-Craft's focused-chunk prediction (Algorithm 1, "Predicting Focused Chunks"): layer after
// layer, the question chunk's attention on every other chunk is accumulated, the chunks are
// split where the cumulative entropy of the gaps between the sorted scores jumps most, and once
// that split has not changed for `window` layers the chunks above it are the focused ones.
// FORWARD's early stop (flags bit 2, PROTOCOL.md) drives it with each layer's chunk matrix.
#pragma once
#include <vector>

namespace ctxr {

// One layer's split, from the cumulative scores of k candidate chunks: sorted descending (ties
// by position), s_1 >= ... >= s_k; diff_i = s_i - s_{i+1} and p_i = diff_i / (diff_1 + ... +
// diff_{k-1}) for i in 1..k-1;
// h_i = -sum_{j<=i} p_j ln p_j (0 ln 0 = 0); i* = the i in 1..k-2 with the largest h_{i+1} - h_i
// (the first on ties); the focused chunks are the top i*. Returns their positions in `scores`,
// ascending; all positions when that is undefined (k < 3, or all scores equal).
std::vector<int> predict_focused(const std::vector<double>& scores);

class FocusedChunks {
 public:
  // `n_chunks` chunks, `question` the question's; the others are the candidates. window >= 1.
  FocusedChunks(int n_chunks, int question, int window);

  // Takes one layer's chunk matrix [n_chunks][n_chunks] (row a, column b: chunk a's new tokens'
  // mass on chunk b); row `question` is the question's attention. Returns true when this layer
  // fixed the focused set: the same proper subset of the candidates for the last `window` layers.
  bool add_layer(const float* chunk_matrix);

  bool fixed() const { return cutoff_ > 0; }
  // L*: the layers seen when the set was fixed (1-based layer count), 0 while not fixed.
  int cutoff() const { return cutoff_; }
  // Chunk indices, ascending: F* once fixed, every candidate until then.
  const std::vector<int>& focused() const { return focused_; }
  // The split of the last layer seen (chunk indices, ascending).
  const std::vector<int>& last() const { return history_.back(); }

 private:
  int n_, question_, window_;
  std::vector<int> candidates_;   // chunk indices other than the question's, ascending
  std::vector<double> cinter_;    // per candidate, cumulative attention of the question
  std::vector<std::vector<int>> history_;
  std::vector<int> focused_;
  int cutoff_ = 0;
};

}  // namespace ctxr
