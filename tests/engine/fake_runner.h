// A ModelRunner without weights, for engine tests that need no model file. Its "KV" is the token
// written at each block slot, and a row's logits are a function of the whole context it reads
// back through its block table, as attention would: a wrong block table, a bad prefix-cache hit
// or a preemption that loses KV changes the output. `reference_logits` is the same function of a
// plain token list: the model the engine must reproduce.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "runtime/model_runner.h"

namespace kvasir::test {

// How the fake model behaves: by default the favourite is a hash of the context; with
// copy_period the favourite repeats the token copy_period back (text that copies its context, where
// n-gram drafts pay); with support > 0 only the favourite and support - 1 fixed other tokens are
// possible (small joint distributions for statistical tests); with err_every > 0 the favourite
// moves to another token on about 1 context in err_every (a draft model that is often right).
struct FakeModel {
  int32_t copy_period = 0;
  int32_t support = 0;
  int32_t err_every = 0;
};

class FakeRunner : public runtime::ModelRunner {
 public:
  FakeRunner(int64_t n_vocab, int64_t num_blocks, int64_t block_size = 16, int64_t max_batch_tokens = 512,
             FakeModel model = {})
      : model_(model),
        info_{.n_vocab = n_vocab,
              .n_ctx_train = 1 << 16,
              .max_batch_tokens = max_batch_tokens,
              .n_kv_blocks = num_blocks,
              .block_size = block_size,
              .identity = "fake"},
        kv_(size_t(num_blocks * block_size), -1) {}

  const runtime::RunnerInfo& info() const override { return info_; }

  Result<const float*> forward(const Batch& batch) override {
    const int64_t bs = info_.block_size;
    if (batch.size() == 0 || batch.size() > info_.max_batch_tokens) return Error{"bad batch size"};
    for (int64_t r = 0; r < batch.size(); ++r) {  // every row's K/V first, as Forward does
      const auto table = batch.blocks_of(batch.seq_index[size_t(r)]);
      const int32_t pos = batch.positions[size_t(r)];
      if (size_t(pos / bs) >= table.size()) return Error{"block table too short"};
      const int32_t block = table[size_t(pos / bs)];
      if (block < 0 || block >= info_.n_kv_blocks) return Error{"block id out of range"};
      kv_[size_t(block * bs + pos % bs)] = batch.tokens[size_t(r)];
    }
    logits_.clear();
    for (int64_t r = 0; r < batch.size(); ++r) {
      if (!batch.want_logits[size_t(r)]) continue;
      const auto table = batch.blocks_of(batch.seq_index[size_t(r)]);
      context_.clear();
      for (int32_t p = 0; p <= batch.positions[size_t(r)]; ++p)
        context_.push_back(kv_[size_t(table[size_t(p / bs)] * bs + p % bs)]);
      const std::vector<float> row = reference_logits(context_, info_.n_vocab, model_);
      logits_.insert(logits_.end(), row.begin(), row.end());
    }
    ++forwards;
    // Virtual time: a fixed cost per step, a little per row and more per logits row (an output
    // head each), so engine tests that read step timing (the speculation controller) are
    // deterministic, whatever the machine's speed or a sanitizer's slowdown.
    *clock_ns += int64_t(cost_scale * double(1'000'000 + 20'000 * batch.size() +
                                             100'000 * int64_t(logits_.size() / size_t(info_.n_vocab))));
    return logits_.data();
  }

  // One clear favourite (logit 6) chosen by a hash of the context, the rest spread in [-2, 2]:
  // greedy is exact and sampling at temperature 1 still varies.
  static std::vector<float> reference_logits(std::span<const int32_t> context, int64_t n_vocab, FakeModel m = {}) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : context) h = (h ^ uint64_t(uint32_t(t))) * 1099511628211ull;
    std::vector<float> out(static_cast<size_t>(n_vocab));
    if (m.support > 0) {  // the favourite 2, then 1, 0.5, 0, ... on fixed tokens 3, 4, 5, ...; the rest impossible
      std::fill(out.begin(), out.end(), -std::numeric_limits<float>::infinity());
      int32_t fav = m.copy_period > 0 && int64_t(context.size()) >= m.copy_period
                        ? context[context.size() - size_t(m.copy_period)]
                        : int32_t(3 + (h >> 7) % uint64_t(m.support));
      if (wrong(h, m)) fav = 3 + (fav - 3 + 1) % m.support;
      for (int32_t i = 0; i < m.support; ++i) out[size_t(3 + i)] = i == 0 ? 1.0f : 1.0f / float(1 << i) - 0.5f;
      out[size_t(fav)] = 2.0f;
      return out;
    }
    for (int64_t i = 0; i < n_vocab; ++i) {
      uint64_t x = (h + uint64_t(i) * 0x9E3779B97F4A7C15ull);
      x ^= x >> 31;
      x *= 0xBF58476D1CE4E5B9ull;
      x ^= x >> 29;
      out[size_t(i)] = float(int64_t(x % 4001) - 2000) / 1000.0f;
    }
    const bool copy = m.copy_period > 0 && int64_t(context.size()) >= m.copy_period;
    size_t fav = copy ? size_t(context[context.size() - size_t(m.copy_period)]) : size_t((h >> 7) % uint64_t(n_vocab));
    if (wrong(h, m)) fav = 3 + (fav + 1) % size_t(n_vocab - 3);
    out[fav] = 6.0f;
    return out;
  }
  static bool wrong(uint64_t h, const FakeModel& m) { return m.err_every > 0 && (h >> 17) % uint64_t(m.err_every) == 0; }

  // The token whose "K/V" a block slot holds (-1: never written).
  int32_t kv_token(int32_t block, int32_t offset) const { return kv_[size_t(block * info_.block_size + offset)]; }

  int64_t forwards = 0;
  int64_t virtual_ns = 0;  // advanced by forward(); a clock for EngineOptions::clock
  int64_t* clock_ns = &virtual_ns;  // a draft runner advances its target's clock
  double cost_scale = 1.0;          // a draft model is cheaper

 private:
  FakeModel model_;
  runtime::RunnerInfo info_;
  std::vector<int32_t> kv_;
  std::vector<int32_t> context_;
  std::vector<float> logits_;
};

}  // namespace kvasir::test
