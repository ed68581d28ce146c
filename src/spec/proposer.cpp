#include "spec/proposer.h"

#include "spec/ngram.h"

namespace kvasir::spec {
namespace {

class NgramProposer final : public Proposer {
 public:
  std::vector<int32_t> propose(int64_t, std::span<const int32_t> context, int32_t max_k) override {
    return propose_ngram(context, max_k);
  }
};

// Drafts once the step has placed its rows, and learns what its forwards cost from each fill.
class ModelProposer final : public Proposer {
 public:
  explicit ModelProposer(std::unique_ptr<ModelDrafter> drafter) : drafter_(std::move(drafter)) {}
  std::vector<int32_t> propose(int64_t, std::span<const int32_t> context, int32_t max_k) override {
    return std::vector<int32_t>(size_t(std::max(max_k, 0)), context.empty() ? 0 : context.back());
  }
  bool drafts_after_scheduling() const override { return true; }
  Status fill(std::span<DraftJob> jobs) override {
    const Status s = drafter_->propose(jobs);
    const ModelDrafter::Timing& t = drafter_->last_timing();
    if (s) {
      for (const auto& [rows, ns] : t.later) cost_.observe_forward(rows, double(ns));
      cost_.observe_first(t.first_logits, t.first_catch_up, double(t.first_ns));
    }
    return s;
  }
  int64_t last_fill_ns() const override { return drafter_->last_timing().total_ns; }
  int32_t catch_up(int64_t id, std::span<const int32_t> context) const override { return drafter_->unseen(id, context); }
  const DraftCostModel* cost() const override { return &cost_; }
  void release(int64_t id) override { drafter_->release(id); }
  int32_t n_blocks() const override { return drafter_->num_blocks(); }
  int32_t n_free_blocks() const override { return drafter_->num_free_blocks(); }

 private:
  std::unique_ptr<ModelDrafter> drafter_;
  DraftCostModel cost_;
};

}  // namespace

std::unique_ptr<Proposer> ngram_proposer() { return std::make_unique<NgramProposer>(); }

Result<std::unique_ptr<Proposer>> model_proposer(std::unique_ptr<runtime::ModelRunner> runner, KvMode kv_mode,
                                                 std::vector<int32_t> token_of_logit, int64_t n_vocab_target,
                                                 std::function<int64_t()> clock) {
  auto d = ModelDrafter::create(std::move(runner), kv_mode, std::move(token_of_logit), n_vocab_target, std::move(clock));
  if (!d) return Error{d.error(), d.error_code()};
  return std::unique_ptr<Proposer>(std::make_unique<ModelProposer>(std::move(*d)));
}

}  // namespace kvasir::spec
