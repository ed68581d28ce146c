#include "sample/sampler.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace kvasir {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using sample_detail::Candidate;
using sample_detail::SortedPrefix;

bool in_order(const Candidate& a, const Candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }
bool by_id(const Candidate& a, const Candidate& b) { return a.id < b.id; }

// NaN (a broken model) ranks like -inf, so that ordering stays a strict weak order.
float rank_value(float x) { return std::isnan(x) ? kNegInf : x; }

constexpr float kFirstGap = 8.f, kLastGap = 64.f;

// Scratch of one sampling call: per thread, reused, never per request.
struct Scratch {
  std::vector<float> work;
  std::vector<Candidate> cand, id_order;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// sum of f(logit) over the first n candidates of the prefix, in id order.
template <class F>
double sum_in_id_order(const SortedPrefix& prefix, size_t n, std::vector<Candidate>& tmp, F f) {
  tmp.clear();
  for (size_t i = 0; i < n; ++i) tmp.push_back(prefix[i]);
  std::sort(tmp.begin(), tmp.end(), by_id);
  double sum = 0;
  for (const Candidate& c : tmp) sum += f(c.logit);
  return sum;
}

template <class F>
double sum_all(std::span<const float> logits, F f) {
  double sum = 0;
  for (float x : logits) sum += f(rank_value(x));
  return sum;
}

}  // namespace

namespace sample_detail {

SortedPrefix::SortedPrefix(std::span<const float> logits, float max, std::vector<Candidate>& buf)
    : logits_(logits), max_(max), buf_(&buf) {
  buf_->clear();  // gathered on first use: a greedy step never pays for it
}

bool SortedPrefix::widen() {
  if (complete_) return false;
  const bool first = gap_ == 0;
  gap_ = first ? kFirstGap : 2 * gap_;
  const float hi = bound_;
  complete_ = gap_ > kLastGap;
  bound_ = complete_ ? kNegInf : max_ - gap_;
  const size_t old = buf_->size();
  size_t finite = 0;
  for (size_t i = 0; i < logits_.size(); ++i) {
    const float x = rank_value(logits_[i]);
    finite += x != kNegInf;
    const bool new_band = first || x < hi;  // the first gather has no upper bound
    // -inf (a masked or impossible token) is never drawn, so never gathered.
    if (new_band && x != kNegInf && (complete_ || x >= bound_)) buf_->push_back({int32_t(i), x});
  }
  if (first) finite_ = finite;
  // Once every possible token is in, widening is over: a row that a grammar's mask leaves with a
  // few tokens costs one scan, not one per band.
  if (buf_->size() == finite_) complete_ = true;
  std::sort(buf_->begin() + ptrdiff_t(old), buf_->end(), in_order);
  return true;
}

bool SortedPrefix::has(size_t i) {
  while (i >= size())
    if (!widen()) return false;
  return true;
}

}  // namespace sample_detail

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) return 0;
  // Vector maxima over blocks of 16 (a compare-select: NaN never wins a `>`, so it ranks like
  // -inf), then the first block holding the maximum, then its first index: a 262k-token row in
  // tens of microseconds where a scalar loop takes hundreds.
  using F16 = float __attribute__((vector_size(64)));
  constexpr size_t kLanes = 16;
  const float* x = logits.data();
  const size_t n = logits.size(), whole = n - n % kLanes;
  const auto load = [&](size_t i) {
    F16 v;
    std::memcpy(&v, x + i, sizeof v);
    return v;
  };
  F16 lane;
  for (size_t l = 0; l < kLanes; ++l) lane[l] = kNegInf;
  for (size_t i = 0; i < whole; i += kLanes) {
    const F16 v = load(i);
    lane = v > lane ? v : lane;
  }
  float best = kNegInf;
  for (size_t l = 0; l < kLanes; ++l) best = lane[l] > best ? lane[l] : best;
  for (size_t i = whole; i < n; ++i) best = x[i] > best ? x[i] : best;
  if (best == kNegInf) return 0;  // nothing possible (all -inf or NaN): the lowest id, like greedy
  F16 target;
  for (size_t l = 0; l < kLanes; ++l) target[l] = best;
  for (size_t i = 0; i < whole; i += kLanes) {
    const auto hit = load(i) == target;
    bool any = false;
    for (size_t l = 0; l < kLanes; ++l) any |= hit[l] != 0;
    if (any)
      for (size_t l = 0;; ++l)
        if (x[i + l] == best) return int32_t(i + l);
  }
  for (size_t i = whole; i < n; ++i)
    if (x[i] == best) return int32_t(i);
  return 0;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

bool Sampler::has_penalties() const {
  return params_.repetition_penalty != 1.f || params_.presence_penalty != 0.f || params_.frequency_penalty != 0.f;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  Distribution d = distribution(logits, history);
  return draw(d);
}

Distribution Sampler::distribution(std::span<const float> logits_in, std::span<const int32_t> history) const {
  const auto& p = params_;
  Scratch& s = scratch();
  std::span<const float> logits = logits_in;
  if (has_penalties()) {
    s.work.assign(logits_in.begin(), logits_in.end());
    const size_t n = p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
    std::unordered_map<int32_t, int> counts;
    for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
    for (const auto& [id, count] : counts) {
      if (id < 0 || size_t(id) >= s.work.size()) continue;
      float& l = s.work[size_t(id)];
      if (p.repetition_penalty != 1.f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      l -= p.presence_penalty + p.frequency_penalty * float(count);
    }
    logits = s.work;
  }
  const int32_t best = argmax(logits);
  const float max_logit = logits.empty() ? 0.f : rank_value(logits[size_t(best)]);
  Distribution d(logits, max_logit == kNegInf ? 0.f : max_logit, s.cand);
  d.best_ = best;
  d.temperature_ = p.temperature;
  // Greedy, or nothing possible (the lowest id, like greedy).
  d.greedy_ = p.temperature <= 0.f || logits.size() <= 1 || max_logit == kNegInf;
  if (d.greedy_) return d;

  SortedPrefix& prefix = d.prefix_;
  // keep: survivors so far, a count of the sorted order; `all` while nothing has cut it.
  const size_t vocab = logits.size();
  size_t keep = vocab;
  if (p.top_k > 0 && size_t(p.top_k) < vocab) {
    keep = size_t(p.top_k);
    if (!prefix.has(keep - 1)) keep = prefix.size();  // fewer possible tokens than k
  }
  auto exp1 = [&](float x) { return std::exp(double(x - max_logit)); };
  // Probabilities at temperature 1 for the nucleus and min-p filters.
  if (p.top_p < 1.f) {
    const double total = keep < vocab ? sum_in_id_order(prefix, keep, s.id_order, exp1) : sum_all(logits, exp1);
    double cum = 0;
    for (size_t i = 0; i < keep && prefix.has(i); ++i) {
      cum += exp1(prefix[i].logit) / total;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.f) {
    const double threshold = std::log(double(p.min_p));  // p_i / p_max >= min_p
    size_t k = 1;
    while (k < keep && prefix.has(k) && double(prefix[k].logit - max_logit) >= threshold) ++k;
    keep = k;
  }
  // Temperature and the softmax's normalizer over the survivors.
  auto expt = [&](float x) { return d.weight(x); };
  d.keep_ = keep;
  d.sum_ = keep < vocab ? sum_in_id_order(prefix, keep, s.id_order, expt) : sum_all(logits, expt);
  if (keep < vocab) prefix.has(keep - 1);  // the boundary candidate, for prob()
  return d;
}

double Distribution::weight(float logit) const { return std::exp(double(logit - max_logit_) / temperature_); }

double Distribution::prob(int32_t id) const {
  if (id < 0 || size_t(id) >= vocab_) return 0;
  if (greedy_) return id == best_ ? 1.0 : 0.0;
  const float x = rank_value(logits_[size_t(id)]);
  if (x == kNegInf) return 0;
  if (keep_ < vocab_) {
    const Candidate& last = prefix_[std::min(keep_, prefix_.size()) - 1];
    const Candidate c{id, x};
    if (in_order(last, c)) return 0;  // ranks after the last survivor: cut
  }
  return weight(x) / sum_;
}

int32_t Sampler::draw_with(Distribution& d, double u01) {
  if (d.greedy_) return d.best_;
  SortedPrefix& prefix = d.prefix_;
  const size_t keep = d.keep_;
  const double u = u01 * d.sum_;
  double acc = 0;
  for (size_t i = 0; i < keep && prefix.has(i); ++i) {
    acc += d.weight(prefix[i].logit);
    if (u < acc) return prefix[i].id;
  }
  prefix.has(keep - 1);  // rounding left u at the very end: the last survivor
  return prefix[std::min(keep, prefix.size()) - 1].id;
}

int32_t Sampler::draw(Distribution& d) {
  if (d.greedy_) return d.best_;
  return draw_with(d, std::uniform_real_distribution<double>(0.0, 1.0)(rng_));
}

int32_t Sampler::draw_at(Distribution& d, int64_t position) const {
  return draw_with(d, position_uniform(params_.seed, position));
}

double position_uniform(uint64_t seed, int64_t position) {
  // splitmix64 of the seed, then of the position mixed into it: independent, uniform bits per pair.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t bits = mix(mix(seed) ^ uint64_t(position));
  return double(bits >> 11) * 0x1.0p-53;
}

}  // namespace kvasir
