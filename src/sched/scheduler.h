// Continuous-batching scheduler: decides, each step, which tokens of which requests to compute,
// under a token budget and the KV block pool. Integers only: the caller (engine) turns a
// SchedulerOutput into a Batch, runs the model, samples, and reports back with update().
//
// One step:
//   1. running sequences with one token left (decodes), then running sequences mid-prefill, each
//      in admission order; a chunk shrinks to the blocks that are free, and when not even one
//      token fits, the most recently admitted running sequence (largest priority value first) is
//      preempted: its blocks are freed and it is requeued for recompute;
//   2. if nobody was preempted, waiting requests in the wait queue's order (sched/wait_queue.h:
//      class, priority, fair share between tenants, arrival), each admitted only when the blocks
//      for its first chunk fit (after prefix-cache hits; with reserve_kv, the blocks of its whole
//      answer next to what every running request may still grow by); the first that does not fit
//      blocks the rest, so nobody is overtaken forever.
// Classes: running prefills of a worse class or priority come after the waiting requests that
// outrank them, and a waiting request that finds no seat or no blocks takes them from the worst
// running request it outranks (preempted, requeued for recompute): batch work yields to
// interactive work within one step. Within a level, seats are shared by tenant weight: a tenant
// below its share takes a seat from the tenant furthest above its own (fair_share_victim).
// With a TPOT target (tpot_slo_ns), the prefill chunks of 1 and 2 share a smaller budget while
// sequences are decoding: only as many prefill tokens as every decoding sequence can absorb and
// still average at most the target per output token, by a step-time model fitted to the
// scheduler's own steps (the token budget of Sarathi-Serve, from the latency target). Held-back
// prefill waits for decodes to bank slack; after kMaxHeldSteps a small chunk goes anyway. And a
// waiting request is admitted next to running ones only while the model says a decode step of
// one more sequence stays within the target (on a slow machine the target caps concurrency).
// Prefill and decode are not modes: every request computes tokens [num_computed, num_tokens).
//
// Speculative decoding (the multi-token step contract): a decoding request may carry draft tokens
// (set_draft before step(); fill_draft may replace them before update()). It is then scheduled as 1 + K rows, its last token and K draft
// tokens, each wanting logits; K shrinks to the token budget, the free blocks (drafts never
// preempt anyone), the context and max_new_tokens. update() gets the draft prefix verification
// accepted plus one more token; the rejected positions are rolled back (block table truncated,
// blocks returned), and the prefix cache only ever registers verified tokens.
//
// Call order: step(), run the model, update(); step() again before update() returns the same step.
// finish()/abort() may be called at any time; a request finished between step() and update() is
// skipped by update() (its ScheduledSeq pointers are dead: do not run it). Not thread-safe: one
// engine loop owns the scheduler.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_manager.h"
#include "sched/request.h"
#include "sched/step_cost.h"
#include "sched/ttft_forecast.h"
#include "sched/wait_queue.h"

namespace kvasir::sched {

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // tokens per step, all sequences together
  int32_t max_seqs = 256;          // running sequences; <= max_batch_tokens so every decode fits a step
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  int32_t max_model_len = 0;       // prompt + generated tokens; 0: what the pool holds
  int32_t max_chunk_tokens = 0;    // cap on one prefill chunk; 0: the token budget only
  bool enable_prefix_cache = true;
  int64_t tpot_slo_ns = 0;         // decode latency target per output token; 0: throughput first
  // Admission counts the KV a request will need (prompt + max_new_tokens, or up to max_model_len)
  // and admits it only when that fits beside what the running requests may still grow by: later
  // preemption becomes rare (drafts and KV holds can still cause it), concurrency lower.
  bool reserve_kv = false;
  std::string model_id = {};       // keys the prefix cache
  kv::BlockHasher hasher = {};     // empty: kv::hash_block
  Clock clock = {};                // empty: steady clock
};

struct ScheduledSeq {
  RequestId id = 0;
  int32_t start = 0, end = 0;                         // compute tokens [start, end) of the request
  // Both valid until update(), or until the request is finished or aborted if that comes first.
  std::span<const int32_t> tokens;                        // tokens [start, end)
  const std::vector<kv::BlockId>* block_table = nullptr;  // physical blocks covering positions [0, end)
  bool want_logits = false;                           // the chunk reaches the last known token
  // Draft tokens among the rows: the last num_draft of [start, end). With drafts every row wants
  // logits (1 + num_draft rows of them).
  int32_t num_draft = 0;
};

struct SchedulerOutput {
  // Running decodes, running prefill chunks, then newly admitted requests.
  std::vector<ScheduledSeq> seqs;
  int32_t num_tokens = 0;            // sum of end - start
  std::vector<RequestId> preempted;  // sent back to waiting by this step (their KV is gone)
  bool empty() const { return seqs.empty(); }
};

// What the caller sampled for a sequence whose chunk wanted logits.
struct SeqOutput {
  RequestId id = 0;
  int32_t token = 0;
  FinishReason finish = FinishReason::None;  // the caller's verdict on this token (stop token, ...)
  // With a draft: the draft tokens verification accepted (a prefix of the scheduled draft), which
  // come before `token` (the correction or bonus token).
  std::vector<int32_t> accepted = {};
};

struct SchedulerCounters {
  int64_t num_steps = 0;
  int64_t num_scheduled_tokens = 0;
  int64_t num_admitted = 0;     // admissions, re-admissions after preemption included
  int64_t num_preemptions = 0;
  int64_t num_yields = 0;       // of them: a running request gave its seat or blocks to one that outranks it
  int64_t num_finished = 0;
  int64_t num_prefill_held = 0;  // steps in which the TPOT target held prefill back
  int64_t num_drafts = 0;        // sequences scheduled with draft tokens
  int64_t num_draft_tokens = 0;  // draft tokens scheduled
  int64_t num_accepted_tokens = 0;  // draft tokens accepted
  // Per draft position j (0 = the first token after the last verified one): drafted and accepted.
  static constexpr size_t kMaxDraftPositions = 16;
  std::array<int64_t, kMaxDraftPositions> draft_tokens_at{}, accepted_tokens_at{};
};

class Scheduler {
 public:
  static Result<Scheduler> create(SchedulerConfig config);

  Status add_request(RequestId id, std::vector<int32_t> prompt, RequestOptions options = {});
  // Draft tokens to verify in the next step, if the request decodes in it (else dropped).
  Status set_draft(RequestId id, std::span<const int32_t> draft);
  const SchedulerOutput& step();
  // Between step() and update(): the draft tokens of a sequence this step scheduled with a draft,
  // replacing what set_draft gave (a drafter that writes the step's own KV blocks, as a
  // self-speculative draft sharing the target's KV does, drafts once its rows are placed). A
  // shorter draft drops the rows beyond it from the step and returns their blocks.
  Status fill_draft(RequestId id, std::span<const int32_t> draft);
  // The sampled token of every sequence of the last step that wanted logits (and is still active).
  // Registers newly computed full blocks in the prefix cache; finishes requests that reached
  // max_new_tokens or max_model_len (Length) or that the caller marked finished.
  Status update(std::span<const SeqOutput> outputs);
  Status finish(RequestId id, FinishReason reason);
  Status abort(RequestId id) { return finish(id, FinishReason::Abort); }
  // Requests finished since the last call, in finishing order.
  std::vector<Request> take_finished();

  const Request* find(RequestId id) const;  // waiting or running; nullptr otherwise
  bool awaiting_update() const { return awaiting_update_; }
  int32_t num_waiting() const { return int32_t(waiting_.size()); }
  int32_t num_running() const { return int32_t(running_.size()); }
  bool has_unfinished() const { return !requests_.empty(); }
  const kv::KvManager& kv() const { return kv_; }
  // For the KV tiers only (engine/kv_tiering.h): they register blocks in the prefix cache and
  // take the ones registered; nothing else changes the pool behind the scheduler.
  kv::KvManager& tier_kv() { return kv_; }

  // KV held outside any request (prefill/decode disaggregation), under ids of the caller's that
  // are never request ids (negative). Blocks stay referenced until release_kv(id).
  // pin_prefix: references the cached full blocks of `tokens` (a prefill's, to export them);
  // the result covers the longest cached run from the start.
  Result<std::vector<int32_t>> pin_prefix(int64_t hold_id, std::span<const int32_t> tokens, std::string_view salt);
  // reserve_prefix: references the cached full blocks of `tokens` and allocates the rest of its
  // full blocks (to import them): every full block's id, the first n_cached already cached.
  struct KvReservation {
    std::vector<int32_t> blocks;
    int32_t n_cached = 0;
  };
  Result<KvReservation> reserve_prefix(int64_t hold_id, std::span<const int32_t> tokens, std::string_view salt);
  // Registers a reservation's blocks as `tokens`' in the prefix cache (their K/V were written).
  Status commit_reserved(int64_t hold_id, std::span<const int32_t> tokens);
  void release_kv(int64_t hold_id);
  int32_t n_kv_holds() const { return int32_t(holds_.size()); }
  const SchedulerCounters& counters() const { return counters_; }
  const StepCostModel& step_cost() const { return cost_; }
  // What the queue holds and what steps cost, for forecasting a newcomer's TTFT (ttft_forecast.h).
  QueueLoad load() const;
  // The fair-share counter of a tenant (service received per unit of weight, lifted; see WaitQueue).
  double tenant_counter(std::string_view tenant) const { return waiting_.counter(tenant); }
  // Time the caller spent since the last step on work that is not a step's (a draft model
  // proposing for the next step, priced on its own): left out of the step being measured.
  void exclude_time(int64_t ns) { excluded_ns_ += std::max<int64_t>(ns, 0); }

  // Prefill tokens one chunk needs at least before the TPOT target lets it into a step (smaller
  // chunks would pay a step's fixed costs for a few tokens), and how many steps in a row prefill
  // may be held back before one such chunk goes regardless (nobody waits forever behind long
  // decodes, and the decodes pay for one small chunk only).
  static constexpr int32_t kMinPrefillChunk = 32;
  static constexpr int32_t kMaxHeldSteps = 256;
  const SchedulerConfig& config() const { return config_; }

 private:
  Scheduler(SchedulerConfig config, kv::KvManager kv);
  int64_t now() const { return config_.clock(); }
  int32_t chunk_limit(int32_t remaining, int32_t budget) const;
  void schedule_running(Request* r, int32_t* budget);
  // Admits waiting requests that outrank `bound` (all of them when null).
  void admit_waiting(int32_t* budget, const Request* bound = nullptr);
  enum class Admission { admitted, no_seat, no_blocks };
  Admission admit(Request* r, int32_t* budget);
  bool seat_free() const;
  int32_t seats() const;
  int32_t final_length(const Request& r) const;
  bool kv_reserved_for(const Request& r, const kv::PrefixHit& hit) const;
  int32_t prefill_cap() const;
  void emit(Request* r, int32_t num_tokens, int32_t* budget, int32_t num_draft = 0);
  int32_t draft_room(const Request& r, int32_t budget, int32_t fit) const;
  Request* pick_victim() const;
  // The worst running request `r` outranks (a worse class or priority), or null.
  Request* yield_victim(const Request& r) const;
  Request* fair_share_victim(const Request& r) const;
  void preempt(Request* victim, int32_t* budget);
  void finish_request(Request* r, FinishReason reason);
  FinishReason length_limit(const Request& r) const;

  SchedulerConfig config_;
  kv::KvManager kv_;
  std::unordered_map<int64_t, std::string> holds_;  // KV holds and their salt
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;  // waiting and running
  WaitQueue waiting_;
  std::vector<Request*> running_;  // admission order
  std::vector<Request> finished_;
  SchedulerOutput out_;
  bool awaiting_update_ = false;
  bool preempted_this_step_ = false;
  std::vector<Request*> candidates_;                   // scratch for step()
  std::unordered_map<RequestId, int32_t> output_of_;  // scratch for update(): id -> index in outputs
  uint64_t next_arrival_seq_ = 0, next_admit_seq_ = 0;
  SchedulerCounters counters_;
  StepCostModel cost_;
  int64_t step_start_ns_ = 0;
  int64_t excluded_ns_ = 0;  // exclude_time() since the last step
  double finish_interval_ns_ = 0;  // moving average of the time between finishes while busy
  int64_t last_finish_ns_ = -1;
  int32_t step_decodes_ = 0, step_prefill_tokens_ = 0, step_draft_rows_ = 0, held_steps_ = 0;
  bool last_step_busy_ = false, force_progress_ = false;
};

}  // namespace kvasir::sched
