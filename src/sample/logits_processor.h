// Logits processors: what a request asks to be done to its rows of logits before its sampler's
// penalties and cuts (sampler.h) see them. Each request gets a chain built from its parameters
// (a logit bias, a minimum length, a grammar) and every row of it passes through the chain in
// order, on a copy. The step loop knows only the chain; a new constraint is one more processor.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace kvasir {

// What processors know of the row they edit, and what one tells those after it.
struct RowContext {
  int32_t n_generated = 0;  // tokens generated before this row (drafts kept earlier in the step included)
  // Set by a constraint (a grammar) for the processors after it:
  bool may_end = false;   // its document is complete: ending is allowed even before min_tokens
  bool only_end = false;  // nothing but ending is allowed
};

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // Whether apply() would change this row: a row no processor touches is sampled in place.
  virtual bool active(const RowContext&) const { return true; }
  // Edits the row; false: no token at all may follow (the request ends here).
  virtual bool apply(std::span<float> row, RowContext& ctx) = 0;
};

// OpenAI's logit_bias: added to the named tokens' logits.
class LogitBias final : public LogitsProcessor {
 public:
  explicit LogitBias(std::vector<std::pair<int32_t, float>> bias) : bias_(std::move(bias)) {}
  bool apply(std::span<float> row, RowContext&) override;

 private:
  std::vector<std::pair<int32_t, float>> bias_;
};

// min_tokens: the stop tokens (end of generation, the request's own) cannot be sampled before n
// tokens were generated, unless a constraint before it says its document is complete.
class MinTokens final : public LogitsProcessor {
 public:
  MinTokens(int32_t n, std::vector<int32_t> stop_ids) : n_(n), stop_ids_(std::move(stop_ids)) {}
  bool active(const RowContext& ctx) const override { return ctx.n_generated < n_; }
  bool apply(std::span<float> row, RowContext& ctx) override;

 private:
  int32_t n_;
  std::vector<int32_t> stop_ids_;
};

class ProcessorChain {
 public:
  void add(std::unique_ptr<LogitsProcessor> p) { chain_.push_back(std::move(p)); }
  bool empty() const { return chain_.empty(); }
  bool active(const RowContext& ctx) const;
  // Every processor in order; false as soon as one leaves nothing to sample.
  bool apply(std::span<float> row, RowContext& ctx) const;

 private:
  std::vector<std::unique_ptr<LogitsProcessor>> chain_;
};

}  // namespace kvasir
