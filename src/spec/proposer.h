// Speculation's proposers behind one interface, chosen when the engine is built: n-gram lookup in
// the request's own text, a draft model of the same vocabulary, the target's own layers (early
// exit, layer skipping), and room for a trained head. The engine's controller decides how many
// rows each request drafts (controller.h); a proposer supplies the tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "runtime/model_runner.h"
#include "spec/controller.h"
#include "spec/model_drafter.h"

namespace kvasir::spec {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Before the step is scheduled: up to max_k draft tokens for a decoding request. A proposer that
  // drafts after scheduling answers with max_k placeholders, which fill() replaces.
  virtual std::vector<int32_t> propose(int64_t id, std::span<const int32_t> context, int32_t max_k) = 0;
  // Whether drafts come from fill(), once the step has placed its rows (a model: a self-draft
  // writes its K/V where the step's verify rows go).
  virtual bool drafts_after_scheduling() const { return false; }
  // Fills the scheduled jobs' drafts (fewer tokens than asked: those rows leave the step).
  virtual Status fill(std::span<DraftJob>) { return {}; }
  // A proposer that scores its drafts (a trained head) drafts before the step is planned instead:
  // fill() for every decoding request at once, each draft with its probability (DraftJob::
  // confidence), and the controller keeps a prefix of each, priced by those probabilities as
  // calibrated against what verification kept (ConfidenceCalibration).
  virtual bool scores_drafts() const { return false; }
  virtual int64_t last_fill_ns() const { return 0; }  // what the last fill() took
  // Context tokens a draft for `id` would compute first (a draft model's catch-up); 0 for lookups.
  virtual int32_t catch_up(int64_t, std::span<const int32_t>) const { return 0; }
  // What its forwards cost, as measured so far; null: drafting costs nothing worth pricing.
  virtual const DraftCostModel* cost() const { return nullptr; }
  virtual void release(int64_t) {}  // the request finished, was aborted or preempted
  // A proposer that drafts from the target's final hidden states: after each step the engine
  // hands it the hidden state (after the output norm) of the row that chose the request's latest
  // token, with the request's length then (prompt and generated tokens).
  virtual bool wants_hidden() const { return false; }
  virtual void observe_hidden(int64_t, std::span<const float>, size_t) {}
  // Its own KV blocks (stats: nothing leaks); 0 when it keeps none.
  virtual int32_t n_blocks() const { return 0; }
  virtual int32_t n_free_blocks() const { return 0; }
};

// The latest earlier occurrence of the request's last tokens (ngram.h).
std::unique_ptr<Proposer> ngram_proposer();

// A model's greedy drafts (model_drafter.h): a draft model with its own KV (KvMode::own) or the
// target's own layers over the target's KV (KvMode::target).
Result<std::unique_ptr<Proposer>> model_proposer(std::unique_ptr<runtime::ModelRunner> runner, KvMode kv_mode,
                                                 std::vector<int32_t> token_of_logit, int64_t n_vocab_target,
                                                 std::function<int64_t()> clock);

}  // namespace kvasir::spec
