// Drafting with a model: a second runner proposes each sequence's next K tokens greedily, in one
// batched forward per draft position for all sequences. Two kinds of KV:
// - KvMode::own (a smaller GGUF of the same vocabulary): every sequence keeps its own paged KV in
//   the draft runner's storage, holding the tokens it last saw; a proposal first computes what
//   changed since (the tokens verification kept, usually one or two; a whole prompt the first time).
// - KvMode::target (the target's own layers, runtime::CpuRunner::self_draft): the draft reads and
//   writes the target's KV through the step's block tables. The target's KV already holds every
//   verified position for the layers the draft runs, so there is nothing to catch up and no KV of
//   the draft's own; the draft rows sit where the step's verify rows go, and the verify forward
//   rewrites them with the target's values before anything reads them.
// Drafts are the draft's argmax (point masses). The engine keeps a draft token exactly when the
// target's own draw at its position is that token (Sampler::draw_at): with probability p(x),
// what the rejection rule gives a point mass, and the output never depends on the drafts.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "kv/kv_manager.h"
#include "runtime/model_runner.h"

namespace kvasir::spec {

enum class KvMode { own, target };

struct DraftJob {
  int64_t id = 0;                       // the request; its draft KV (KvMode::own) lives until release(id)
  std::span<const int32_t> context;     // every token so far (prompt and generated)
  int32_t k = 0;                        // draft tokens wanted
  // KvMode::target: the target's blocks for positions [0, context.size() + k - 1), which hold the
  // K/V of positions [0, context.size() - 1) (the step that verifies this draft scheduled them).
  const std::vector<int32_t>* target_blocks = nullptr;
  std::vector<int32_t> draft = {};      // out: up to k tokens (fewer when the draft KV is full)
  // out, from a proposer that scores its drafts: its probability for each, given the ones before
  std::vector<float> confidence = {};
};

class ModelDrafter {
 public:
  // token_of_logit maps the runner's logit columns to token ids (a restricted head); empty: the
  // identity. Tokens at or above n_vocab_target are never proposed.
  static Result<std::unique_ptr<ModelDrafter>> create(std::unique_ptr<runtime::ModelRunner> runner, KvMode kv_mode,
                                                      std::vector<int32_t> token_of_logit, int64_t n_vocab_target,
                                                      std::function<int64_t()> clock);

  // Fills every job's draft. Jobs must name distinct requests.
  Status propose(std::span<DraftJob> jobs);
  // Context tokens a proposal for `id` would compute before its first draft position (what the
  // draft KV lacks, the last token aside: that one is fed for logits in any case); 0 with the
  // target's KV.
  int32_t unseen(int64_t id, std::span<const int32_t> context) const;
  // What the last propose() took, by the clock given at creation: in all; its first position
  // (one logits row per request after the context it had not seen: a prompt's worth the first
  // time); and each later position, a forward of one row per request still drafting.
  struct Timing {
    int64_t total_ns = 0;
    int32_t first_logits = 0, first_catch_up = 0;
    int64_t first_ns = 0;
    std::vector<std::pair<int32_t, int64_t>> later;  // (rows, ns) per later position
  };
  const Timing& last_timing() const { return timing_; }
  // Forgets a request (finished, aborted or preempted): its draft blocks go back to the pool.
  void release(int64_t id);
  // The draft pool's blocks (stats: nothing leaks); 0 with the target's KV.
  int32_t num_free_blocks() const { return kv_ ? kv_->num_free_blocks() : 0; }
  int32_t num_blocks() const { return kv_ ? kv_->num_blocks() : 0; }

 private:
  ModelDrafter(std::unique_ptr<runtime::ModelRunner> runner, std::optional<kv::KvManager> kv,
               std::vector<int32_t> token_of_logit, int64_t n_vocab_target, std::function<int64_t()> clock);
  // Queues the rows of a job's first draft position: KvMode::own, the context its KV lacks and the
  // last token; KvMode::target, the last token. False: no room in the draft KV.
  bool queue_first(DraftJob& j, int32_t k, const std::unordered_set<int64_t>& busy);
  // The best proposable token of one logits row.
  int32_t pick(const float* row) const;
  // Runs the pending rows in forwards of at most max_batch_tokens; a row that wants logits gets
  // its job's draft token `d` from them.
  Status flush();
  bool reserve(int64_t id, int32_t tokens, const std::unordered_set<int64_t>& busy);

  std::unique_ptr<runtime::ModelRunner> runner_;
  std::optional<kv::KvManager> kv_;  // KvMode::own only
  std::vector<int32_t> token_of_logit_;
  int64_t n_vocab_target_ = 0;
  struct Held {
    std::vector<int32_t> tokens;  // what the request's draft KV holds, position by position
    uint64_t last_used = 0;       // the propose() call that last drafted for it
  };
  std::unordered_map<int64_t, Held> held_;  // KvMode::own only
  uint64_t calls_ = 0;
  std::function<int64_t()> clock_;
  Timing timing_;
  struct Row {
    int32_t token, pos;
    const std::vector<int32_t>* blocks;  // the sequence's block table (own or the target's)
    DraftJob* job;                       // null: no logits wanted
    int32_t d;                           // the draft token this row's logits choose
  };
  std::vector<Row> pending_;
  Batch batch_;
};

}  // namespace kvasir::spec
