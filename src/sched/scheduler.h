// Continuous-batching scheduler: decides, each step, which tokens of which requests to compute,
// under a token budget and the KV block pool. Integers only: the caller (engine) turns a
// SchedulerOutput into a Batch, runs the model, samples, and reports back with update().
//
// One step:
//   1. running sequences with one token left (decodes), then running sequences mid-prefill, each
//      in admission order; a chunk shrinks to the blocks that are free, and when not even one
//      token fits, the most recently admitted running sequence (largest priority value first) is
//      preempted: its blocks are freed and it is requeued for recompute;
//   2. if nobody was preempted, waiting requests in (priority, arrival) order, each admitted only
//      when the blocks for its first chunk fit (after prefix-cache hits); the first that does not
//      fit blocks the rest, so nobody is overtaken forever.
// Prefill and decode are not modes: every request computes tokens [num_computed, num_tokens).
//
// Call order: step(), run the model, update(); step() again before update() returns the same step.
// finish()/abort() may be called at any time; a request finished between step() and update() is
// skipped by update() (its ScheduledSeq pointers are dead: do not run it). Not thread-safe: one
// engine loop owns the scheduler.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_manager.h"
#include "sched/request.h"

namespace kvasir::sched {

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // tokens per step, all sequences together
  int32_t max_seqs = 256;          // running sequences; <= max_batch_tokens so every decode fits a step
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  int32_t max_model_len = 0;       // prompt + generated tokens; 0: what the pool holds
  int32_t max_chunk_tokens = 0;    // cap on one prefill chunk; 0: the token budget only
  bool enable_prefix_cache = true;
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
};

struct SchedulerCounters {
  int64_t num_steps = 0;
  int64_t num_scheduled_tokens = 0;
  int64_t num_admitted = 0;     // admissions, re-admissions after preemption included
  int64_t num_preemptions = 0;
  int64_t num_finished = 0;
};

class Scheduler {
 public:
  static Result<Scheduler> create(SchedulerConfig config);

  Status add_request(RequestId id, std::vector<int32_t> prompt, RequestOptions options = {});
  const SchedulerOutput& step();
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
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct WaitKey {
    int32_t priority;
    uint64_t arrival_seq;
    bool operator<(const WaitKey& o) const {
      return priority != o.priority ? priority < o.priority : arrival_seq < o.arrival_seq;
    }
  };

  Scheduler(SchedulerConfig config, kv::KvManager kv);
  int64_t now() const { return config_.clock(); }
  int32_t chunk_limit(int32_t remaining, int32_t budget) const;
  void schedule_running(Request* r, int32_t* budget);
  void admit_waiting(int32_t* budget);
  void emit(Request* r, int32_t num_tokens, int32_t* budget);
  Request* pick_victim() const;
  void preempt(Request* victim, int32_t* budget);
  void finish_request(Request* r, FinishReason reason);
  FinishReason length_limit(const Request& r) const;

  SchedulerConfig config_;
  kv::KvManager kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;  // waiting and running
  std::map<WaitKey, Request*> waiting_;
  std::vector<Request*> running_;  // admission order
  std::vector<Request> finished_;
  SchedulerOutput out_;
  bool awaiting_update_ = false;
  bool preempted_this_step_ = false;
  std::vector<Request*> candidates_;                   // scratch for step()
  std::unordered_map<RequestId, int32_t> output_of_;  // scratch for update(): id -> index in outputs
  uint64_t next_arrival_seq_ = 0, next_admit_seq_ = 0;
  SchedulerCounters counters_;
};

}  // namespace kvasir::sched
