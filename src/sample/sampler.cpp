#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kvasir {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::apply_penalties(std::span<const int32_t> history) {
  const auto& p = params_;
  if (p.repetition_penalty == 1.f && p.presence_penalty == 0.f && p.frequency_penalty == 0.f) return;
  const size_t n = p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
  for (const auto& [id, count] : counts) {
    if (id < 0 || size_t(id) >= work_.size()) continue;
    float& l = work_[size_t(id)];
    if (p.repetition_penalty != 1.f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * float(count);
  }
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  work_.assign(logits.begin(), logits.end());
  apply_penalties(history);
  const auto& p = params_;
  if (p.temperature <= 0.f) return argmax(work_);

  cand_.resize(work_.size());
  for (size_t i = 0; i < work_.size(); ++i) cand_[i] = {int32_t(i), work_[i]};
  // Sort by logit descending, ties by id, so the result never depends on sort stability.
  auto by_logit = [](const Candidate& a, const Candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  size_t keep = cand_.size();
  if (p.top_k > 0 && size_t(p.top_k) < keep) {
    keep = size_t(p.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Probabilities at temperature 1 for the nucleus and min-p filters.
  const float max_logit = cand_[0].logit;
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += std::exp(double(cand_[i].logit - max_logit));
  if (p.top_p < 1.f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += std::exp(double(cand_[i].logit - max_logit)) / total;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.f) {
    const double threshold = std::log(double(p.min_p));  // p_i / p_max >= min_p
    size_t k = 1;
    while (k < keep && double(cand_[k].logit - max_logit) >= threshold) ++k;
    keep = k;
  }
  // Temperature, softmax over the survivors, one uniform draw.
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += std::exp(double(cand_[i].logit - max_logit) / p.temperature);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * sum;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += std::exp(double(cand_[i].logit - max_logit) / p.temperature);
    if (u < acc) return cand_[i].id;
  }
  return cand_[keep - 1].id;
}

}  // namespace kvasir
