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
//
// Two halves, for speculative decoding: distribution() applies every processor above and returns
// the processed next-token distribution (probabilities of any token, O(1) each); draw() makes the
// one seeded draw from it. sample() is the two in a row. Verification compares exactly the
// distribution that sampling draws from.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvasir {

namespace sample_detail {
struct Candidate {
  int32_t id;
  float logit;
};
// The candidates in sampling order (logit descending, id ascending), gathered lazily: first those
// within a few nats of the maximum, then within twice that, ..., finally all that are not -inf. Every widening only
// appends what ranks below everything gathered before, so a walk over the prefix keeps its state.
class SortedPrefix {
 public:
  SortedPrefix(std::span<const float> logits, float max, std::vector<Candidate>& buf);
  size_t size() const { return buf_->size(); }  // gathered so far
  const Candidate& operator[](size_t i) const { return (*buf_)[i]; }  // after has(i)
  bool widen();         // gathers more; false once all are in
  bool has(size_t i);   // whether candidate i exists, gathering as needed

 private:
  std::span<const float> logits_;
  float max_;
  std::vector<Candidate>* buf_;
  float gap_ = 0, bound_ = 0;
  bool complete_ = false;
  size_t finite_ = 0;  // candidates that are not -inf (counted by the first scan)
};
}  // namespace sample_detail

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

// A uniform number in [0, 1) that depends only on (seed, position): what Sampler::draw_at uses.
double position_uniform(uint64_t seed, int64_t position);

// Index of the largest value; the lowest index wins a tie.
int32_t argmax(std::span<const float> logits);

// The processed next-token distribution of one sampling step. It refers to the logits it was made
// from and to per-thread scratch: valid until the next distribution() on the same thread.
class Distribution {
 public:
  bool greedy() const { return greedy_; }
  // p(id) after penalties, top-k / top-p / min-p and temperature: 0 for a token they cut; for
  // greedy 1 at the argmax, 0 elsewhere.
  double prob(int32_t id) const;
  int32_t size() const { return int32_t(vocab_); }  // the vocabulary

 private:
  friend class Sampler;
  Distribution(std::span<const float> logits, float max_logit, std::vector<sample_detail::Candidate>& buf)
      : logits_(logits), max_logit_(max_logit), prefix_(logits, max_logit, buf), vocab_(logits.size()) {}
  double weight(float logit) const;  // exp((logit - max) / temperature)

  std::span<const float> logits_;  // after penalties
  float max_logit_ = 0;
  sample_detail::SortedPrefix prefix_;
  size_t vocab_ = 0;
  size_t keep_ = 0;        // survivors: the first keep_ candidates in sampling order
  double sum_ = 0;         // of weight() over the survivors, in id order
  float temperature_ = 1;
  bool greedy_ = false;
  int32_t best_ = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `history`: the sequence so far (prompt + generated), for penalties.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The distribution sample() would draw from; consumes no randomness.
  Distribution distribution(std::span<const float> logits, std::span<const int32_t> history) const;
  // The one seeded draw from `d` (walked in sampling order); greedy takes no randomness.
  int32_t draw(Distribution& d);
  // The draw from `d` for the token at `position` of the sequence (its index among prompt and
  // generated tokens), with the uniform position_uniform(seed, position) instead of the stream:
  // the engine's draws. The token at a position is then the same however the steps ran: alone or
  // in a batch, after a preemption, and with or without speculative drafts before it.
  int32_t draw_at(Distribution& d, int64_t position) const;
  const SamplingParams& params() const { return params_; }

 private:
  bool has_penalties() const;
  static int32_t draw_with(Distribution& d, double u01);

  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kvasir
