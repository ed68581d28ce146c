// Per-request token sampling: seeded and deterministic.
//
// Order of application (documented contract):
//   1. penalties over the last `penalty_last_n` tokens of the sequence (prompt + generated):
//      repetition (logit / r when positive, logit * r when negative), then
//      presence (- presence once a token occurred) and frequency (- frequency * count);
//   2. temperature <= 0: greedy argmax, the lowest id wins a tie — done;
//   3. top-k (k <= 0 disables), 4. top-p (nucleus, p >= 1 disables),
//   5. min-p (keep p_i >= min_p * p_max; 0 disables), all on temperature-1 probabilities;
//   6. temperature scaling of the survivors, softmax, one draw from the request's RNG.
// Candidates are ordered by logit descending, then id ascending; the draw walks the survivors in
// that order; normalizing sums (the nucleus total, the softmax) are taken in id order. The result
// is a pure function of (logits, history, params, RNG state): which thread samples, or what else
// is in the batch, never changes it.
//
// Speed: nothing here is proportional to the vocabulary times log(vocabulary). Only the
// candidates a step can reach are gathered and sorted: those within a few nats of the maximum,
// widened (lower threshold) only when a walk runs past them, so a 262k vocabulary costs a few
// linear passes per token, not a full sort. Scratch is per thread, not per request, so concurrent
// requests sample in parallel without holding vocabulary-sized buffers each.
#pragma once
#include <cstdint>
#include <random>
#include <span>

namespace kvasir {

struct SamplingParams {
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;
  uint64_t seed = 0;
};

// Index of the largest value; the lowest index wins a tie.
int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `history`: the sequence so far (prompt + generated), for penalties.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  const SamplingParams& params() const { return params_; }

 private:
  bool has_penalties() const;

  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kvasir
