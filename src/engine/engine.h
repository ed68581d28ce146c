// The serving engine: many requests over one model, continuous batching through the scheduler,
// one batched forward per step.
//
//   EngineCore  single-threaded: add_request / abort / step() -> per-request Deltas.
//   Engine      thread-safe front: a loop thread drives EngineCore; other threads submit
//               requests, read their streams and cancel them.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <atomic>
#include <functional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "grammar/matcher.h"
#include "model/model.h"
#include "runtime/model_runner.h"
#include "spec/proposer.h"
#include "sample/sampler.h"
#include "kv/block_store.h"
#include "sched/request.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::engine {

using sched::FinishReason;
using sched::RequestId;

struct StopConditions {
  // Generated tokens at most. 0: only the prompt is computed, and the request finishes with
  // FinishReason::Length (scoring a prompt, embedding it, warming the prefix cache).
  int32_t max_tokens = 256;
  int32_t min_tokens = 0;                 // EOS / stop tokens are suppressed before this many
  std::vector<std::string> stop_strings;  // generation ends before the first occurrence (not shown)
  std::vector<int32_t> stop_token_ids;    // extra end-of-generation tokens
  bool ignore_eos = false;                // keep going past the model's EOG tokens
};

// Speculative decoding: a proposer drafts up to max_k tokens for a decoding request, one forward
// verifies them all (lossless: sampler distributions and rejection sampling, greedy = the longest
// matching prefix), and with `adaptive` a controller picks K per request and step from its
// acceptance so far and the step cost the scheduler has measured (K = 0: not this step).
// Proposers: n-gram lookup in the request's own text; a draft model of the same vocabulary; the
// target's own first layers (early exit) or all but a few (layer skipping).
enum class SpecMethod { none, ngram, draft, early_exit, layer_skip, head };

struct SpecOptions {
  SpecMethod method = SpecMethod::none;
  int32_t max_k = 4;
  bool adaptive = true;  // false: always max_k (when the proposer has that many)
  // draft: the draft model, kept alive by the engine (its vocabulary must be the target's: the
  // caller checks the tokens).
  std::shared_ptr<const Model> draft_model;
  int32_t exit_layer = 0;            // early_exit: the draft runs layers [0, exit_layer)
  std::vector<int32_t> skip_layers;  // layer_skip: the draft runs every layer but these
  // Self-speculative drafts project onto these tokens only (the most frequent ones); empty: all.
  std::vector<int32_t> head_tokens;
  std::string head_file;  // head: a trained EAGLE-style draft head (kvasir distill --head)
  // head: a request stops drafting where the head's confidence in its drafts (the product of its
  // probabilities for them) falls below this (spec/eagle_proposer.h); 0: the controller's count.
  double head_min_confidence = 0.2;
  uint64_t draft_kv_mem_bytes = 0;  // a draft model's own KV; 0: as many tokens as the target's holds, capped at 512 MiB (self-drafts share the target's)
};

// How an embedding request pools its prompt's final hidden states (engine/embedding's result is
// L2-normalized): the mean over every token, the first token's (CLS), or the last token's.
enum class Pooling { none, mean, cls, last };

struct GenerationParams {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StopConditions stop;
  int32_t priority = 0;        // lower runs first within a service class
  // Serving under SLOs (sched/wait_queue.h, sched/ttft_forecast.h): batch work yields to
  // interactive work; tenants of one class and priority share by weight; a request with a TTFT
  // deadline that its forecast misses is refused at submit (ErrorCode::exhausted, retry_after_ms).
  sched::ServiceClass service_class = sched::ServiceClass::interactive;
  std::string tenant;          // fair-share unit; empty: one shared tenant
  double tenant_weight = 1.0;
  double ttft_deadline_ms = 0; // 0: no deadline, always queued
  std::string cache_salt;      // tenant isolation of the prefix cache
  int32_t top_logprobs = -1;   // -1: no logprobs; 0..20: chosen token's logprob + that many alternatives
  // With top_logprobs >= 0: the alternatives are these tokens (at most 20, in this order) instead of
  // the most likely ones; what a cross-encoder reranker reads ("yes" against "no").
  std::vector<int32_t> logprob_tokens;
  // Prompt scoring: -1 none; 0..20: every prompt token's logprob under the model given the tokens
  // before it (each with its rank and that many alternatives). Every prompt row is computed then
  // (no prefix-cache hits), and the list comes once, in the delta after the prompt's last chunk.
  int32_t prompt_logprobs = -1;
  // Embeddings: with max_tokens 0, the final delta carries the pooled, L2-normalized hidden state.
  Pooling pooling = Pooling::none;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits before sampling
  bool speculative = true;     // false: never drafted for, even when the engine speculates
  // Constrained output (engine/structured.h): only tokens the grammar allows are sampled, drafts
  // included; end of generation only where the document is complete, and generation ends as
  // soon as nothing else may follow. Null: free text.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // Lazy grammar (tool calls with tool_choice "auto"): free text until this text appears in the
  // output, then the grammar, whose documents begin with it, applies from where it began. Empty:
  // the grammar applies from the first token.
  std::string grammar_trigger;
  // Prefill/decode disaggregation: a prefill-only request (max_tokens 0) whose prompt's full KV
  // blocks are pinned as its chunks compute them: each delta that brings more names the hold and
  // every block pinned so far (kv_hold, kv_blocks; earlier ids never change), and the final delta
  // of a completed prefill names all of them. The blocks stay referenced, also after the request
  // ends however it ends, until the caller's release_kv(kv_hold) for the hold it was told of.
  bool pin_kv = false;
  // A LoRA adapter (runner().load_adapter) its rows go through; null: the base model. Its prefix
  // cache entries are its own (the adapter's identity salts them).
  std::shared_ptr<const LoraAdapter> adapter;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;  // NaN: none (a prompt's first token has nothing before it)
  int32_t rank = 0;   // 1: the most likely token of its row; 0: not known
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens served by the prefix cache
};

struct Timings {  // milliseconds; -1 when not applicable
  double queue_ms = -1, ttft_ms = -1, tpot_ms = -1, e2e_ms = -1;
};

// What one step produced for one request. The last delta of a request has finish != None and
// carries usage and timings.
struct Delta {
  RequestId id = 0;
  std::vector<int32_t> tokens = {};        // new tokens (stop tokens excluded)
  std::string text = {};                   // new complete-UTF-8 text, stop strings cut off
  std::vector<TokenLogprob> logprobs = {}; // one per new token when requested
  std::vector<TokenLogprob> prompt_logprobs = {};  // once, when requested: one per prompt token
  std::vector<float> embedding = {};       // the final delta of an embedding request: [n_embd], unit length
  FinishReason finish = FinishReason::None;
  int64_t kv_hold = 0;                     // pin_kv: the hold to release (0: none new in this delta)
  std::vector<int32_t> kv_blocks = {};     // pin_kv: the prompt's full blocks computed so far, in order
  Usage usage = {};
  Timings timings = {};
};

// The engine's own settings: its step budget, scheduling and speculation. Where the model runs and
// how its KV is stored are the runner's (runtime::RunnerOptions); backends/engine_factory.h builds
// both from one set of flags.
struct EngineOptions {
  int32_t max_batch_tokens = 512;
  int32_t max_seqs = 64;
  int32_t max_model_len = 0;   // prompt + generated; 0: min(n_ctx_train, what the pool holds)
  int num_threads = 0;         // the sampling pool's threads when `pool` is null; 0: physical cores
  // The threads rows are sampled and scored on: share the CPU runner's (they never run at once);
  // null: a pool of the engine's own.
  std::shared_ptr<ThreadPool> pool = nullptr;
  bool prefix_cache = true;
  // The prefix cache's tiers (engine/kv_tiering.h): a folder and its size bound (empty: none), and
  // a Redis/Valkey server shared by instances (redis://HOST:PORT; empty: none).
  std::string kv_disk_dir;
  uint64_t kv_disk_bytes = 0;
  std::string kv_store_url;
  double tpot_target_ms = 0;   // decode latency target per output token (sched::SchedulerConfig); 0: off
  bool reserve_kv = false;     // admit only when the whole answer's KV fits (sched::SchedulerConfig)
  SpecOptions spec;
  sched::Clock clock = {};     // the scheduler's step timing (its cost model); empty: steady clock
};

// Bucket bounds of EngineStats::iteration_tokens (vLLM's iteration_tokens_total).
inline constexpr int64_t kIterationTokenBounds[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

struct EngineStats {
  int32_t num_running = 0, num_waiting = 0;
  // Rows per forward (prompt and decode tokens of one step): counts per bucket of
  // kIterationTokenBounds (the last: above them all), and their sum.
  std::vector<int64_t> iteration_tokens = std::vector<int64_t>(std::size(kIterationTokenBounds) + 1, 0);
  int64_t iteration_tokens_sum = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t prefix_queries = 0, prefix_hits = 0, prefix_query_tokens = 0, prefix_hit_tokens = 0, prefix_evictions = 0;
  int64_t num_preemptions = 0;
  int64_t num_yields = 0;        // preemptions that gave a seat to a better class or priority
  int64_t num_refused = 0;       // submits refused because the TTFT forecast missed the deadline
  int64_t num_prefill_held = 0;  // steps in which the TPOT target held prefill back
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;  // computed prompt tokens, sampled tokens
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;  // speculative decoding
  std::vector<int64_t> spec_draft_tokens_at, spec_accepted_tokens_at;  // per draft position, up to --spec-k
  int64_t num_steps = 0;
  // The prefix cache's stores beyond memory (--kv-disk, --kv-store), in lookup order: blocks
  // each gave back, and its own counters; requests that got blocks, time spent loading, blocks queued.
  struct KvTierStats {
    std::string tier;
    std::string pool_id;  // BlockStore::pool_id: shared with the instances that report the same
    int64_t loaded_blocks = 0;
    kv::StoreCounters store;
  };
  std::vector<KvTierStats> kv_tiers;
  int64_t kv_tier_loads = 0, kv_tier_load_ns = 0, kv_tier_saved_blocks = 0;
  int64_t kv_tier_prefetched_blocks = 0;  // of the blocks loaded: read off the engine thread
  int64_t draft_kv_blocks_total = 0, draft_kv_blocks_used = 0;  // a draft model's own KV pool
  int32_t max_model_len = 0;
  int32_t max_seqs = 0;  // seats: sequences in one step at most
  int64_t kv_layers = 0, kv_quantized_layers = 0;  // layers, and those whose KV is Q8_0 / Q4_0
};

class EngineCore {
 public:
  // Over a runner (the CPU or CUDA one from backends/, a fake one in tests); the KV block size is
  // the runner's. A model-drafting method (draft, early_exit, layer_skip) takes its draft runner
  // here, with the token of each of its logits when its head covers part of the vocabulary.
  static Result<std::unique_ptr<EngineCore>> create(std::unique_ptr<runtime::ModelRunner> runner,
                                                    const Tokenizer& tokenizer, const EngineOptions& options,
                                                    std::unique_ptr<runtime::ModelRunner> draft_runner = nullptr,
                                                    std::vector<int32_t> draft_token_of_logit = {},
                                                    std::unique_ptr<spec::Proposer> head_proposer = nullptr);
  ~EngineCore();

  // Checks a request without queueing it (non-empty prompt, ids in the vocabulary, prompt
  // shorter than max_model_len, sane values). Pure: safe to call from any thread.
  Status validate(const GenerationParams& params) const;
  // Validates and queues the request under a fresh id, its stored KV blocks read first.
  Result<RequestId> add_request(GenerationParams params);
  // Queues an already validated request under an id chosen by the caller (unique); its stored KV
  // blocks are the caller's to read first (prefetch_kv: Engine::submit does).
  Status add_request_with_id(RequestId id, GenerationParams params);
  void abort(RequestId id);  // its final delta (FinishReason::Abort) comes out of the next step()
  // Runs one scheduler step and one batched forward; appends a delta per request that produced
  // tokens or finished.
  Status step(std::vector<Delta>& out);
  bool has_unfinished() const;
  EngineStats stats() const;
  sched::QueueLoad load() const;  // for TTFT forecasts (sched/ttft_forecast.h)
  const Tokenizer& tokenizer() const;
  runtime::ModelRunner& runner();
  // Reads a new prompt's stored KV blocks (engine/kv_tiering.h) into the prefix cache: the plan
  // and the import through `on_engine_thread`, the reading (files, network) on the caller's
  // thread, so the step loop never waits on a disk or a store. Engine::submit runs it before
  // queueing. Nothing without KV tiers.
  void prefetch_kv(const GenerationParams& params, const std::function<void(const std::function<void()>&)>& on_engine_thread);

  // KV held outside requests (disaggregation; sched::Scheduler's holds). Hold ids are negative.
  // reserve_kv: blocks for `tokens`' full blocks, the first n_cached already in the prefix cache;
  // commit_kv: their K/V were written, register them as `tokens`' in the prefix cache.
  Result<sched::Scheduler::KvReservation> reserve_kv(int64_t hold_id, std::span<const int32_t> tokens,
                                                     const std::string& salt);
  Status commit_kv(int64_t hold_id, std::span<const int32_t> tokens);
  void release_kv(int64_t hold_id);

 private:
  struct Impl;
  explicit EngineCore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Deltas of one request, filled by the engine loop, read by one consumer.
class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }
  // Blocks until a delta arrives; false once the final delta has been read.
  bool next(Delta& out);
  // Waits up to `timeout` for next() to have something to return (a delta, or the end).
  bool wait_ready(std::chrono::milliseconds timeout);
  void push(Delta d);  // engine side

 private:
  RequestId id_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Delta> queue_;
  bool finished_ = false, drained_ = false;
};

class Engine {
 public:
  explicit Engine(std::unique_ptr<EngineCore> core);
  ~Engine();  // aborts what is left and joins the loop
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Result<std::shared_ptr<RequestStream>> submit(GenerationParams params);
  void abort(RequestId id);  // safe from any thread, also after the request finished
  EngineStats stats();
  // Stops accepting requests (submit fails with ErrorCode::unavailable) and waits until the ones
  // already in finish, or until `deadline`. True: nothing is left.
  bool drain(std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // Aborts every request, queued or running: each stream gets its final delta (FinishReason::Abort).
  void abort_all();
  const Tokenizer& tokenizer() const { return core_->tokenizer(); }
  // Runs fn on the loop thread between steps and waits for it: what KV holds need. False (fn not
  // run) once the engine is shutting down.
  bool call(const std::function<void(EngineCore&)>& fn);
  // A fresh hold id for reserve_kv (negative, never a pin's).
  int64_t new_hold_id() { return next_hold_.fetch_sub(1); }
  runtime::ModelRunner& runner() { return core_->runner(); }

 private:
  void loop();
  // The refusal of a request whose (calibrated) forecast TTFT misses its deadline, else nullopt
  // with the raw forecast in *forecast_ns (-1: none); called under mutex_.
  std::optional<Error> refuse_late(const GenerationParams& params, int64_t* forecast_ns) const;

  std::unique_ptr<EngineCore> core_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;
  std::vector<std::pair<RequestId, GenerationParams>> pending_adds_;
  std::vector<RequestId> pending_aborts_;
  std::vector<std::function<void()>> pending_calls_;
  std::atomic<int64_t> next_hold_{-1};
  RequestId next_id_ = 1;
  EngineStats stats_;
  sched::QueueLoad load_;  // after the last step; submit adds what is pending to it
  sched::ForecastCalibration calibration_;
  // Admitted requests whose forecast is worth learning from (>= 10% of their deadline): raw forecast.
  std::unordered_map<RequestId, int64_t> forecasts_;
  int64_t num_refused_ = 0;
  bool stop_ = false, draining_ = false;
  std::thread thread_;
};

}  // namespace kvasir::engine
