// What a request gets from its rows beyond the sampled tokens: log-probabilities (the chosen
// token's, its rank and the most likely alternatives; the same for prompt scoring) and pooled
// embeddings. Pure functions of the rows; the step loop only routes rows here.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace kvasir::engine {

// log-softmax of `id` in the row, its rank (1: the most likely) and the n_top most likely
// (token, logprob) pairs, the lowest id first among equals. Per-thread scratch: safe in parallel.
// With `only` non-empty, the alternatives are those tokens' (in that order) instead.
TokenLogprob logprobs_of(std::span<const float> logits, int32_t id, int32_t n_top, std::span<const int32_t> only = {});

// The sum of an embedding request's pooled hidden states, row by row as its chunks arrive.
class EmbeddingPool {
 public:
  void add(const float* rows, int32_t n, int64_t n_embd);
  int32_t n_pooled() const { return n_pooled_; }
  // The pooled rows' mean, scaled to unit length (a zero vector stays zero).
  std::vector<float> unit_mean() const;

 private:
  std::vector<double> sum_;
  int32_t n_pooled_ = 0;
};

}  // namespace kvasir::engine
