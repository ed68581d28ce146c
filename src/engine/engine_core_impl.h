// EngineCore's private state, shared by the files that implement it: engine_core.cpp (the step:
// batch, forward, sampling, stop rules, deltas) and engine_spec.cpp (speculation: drafts, the
// controller and its check). Not part of the engine's interface.
#pragma once
#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/adapter_slots.h"
#include "engine/engine.h"
#include "engine/kv_tiering.h"
#include "engine/grammar_constraint.h"
#include "engine/outputs.h"
#include "engine/stop_matcher.h"
#include "sample/logits_processor.h"
#include "sched/scheduler.h"
#include "spec/controller.h"
#include "spec/proposer.h"

namespace kvasir::engine {
namespace detail {

// Per-request state the scheduler does not hold: sampling, text and stop rules.
struct Live {
  GenerationParams params;
  Sampler sampler;
  ProcessorChain processors;               // logit bias, grammar, min_tokens: in that order
  GrammarConstraint* grammar = nullptr;    // the chain's grammar, when the request has one
  StreamDecoder decoder;
  StopMatcher stops;
  std::vector<int32_t> new_tokens;       // produced this step
  std::string new_text;
  std::vector<TokenLogprob> new_logprobs;
  bool stopped_by_string = false;
  // This step's pick (pick_token, on any pool thread), committed in batch order by commit_token:
  // the draft tokens verification accepted, then one more token (each with its logprob).
  std::vector<int32_t> picked;
  std::vector<TokenLogprob> picked_logprobs;
  // Speculation controller: this request's record of accepted drafts per position (conditional on
  // the ones before: acceptance falls with depth), planned with as spec::AcceptanceRecord::estimate
  // shrunk toward the proposer's record over all requests (spec_accept, refreshed each step), and
  // steps since the last draft, so that a request whose drafts stopped paying is probed again now
  // and then: after spec_probe_wait steps, which doubles with each probe (up to 256) and falls back
  // to 4 once the plan drafts for it again, so that a proposer that never pays costs ever fewer probes.
  spec::AcceptanceRecord spec_own{0.9};  // about the last ten drafts at each position
  std::vector<double> spec_accept;
  std::vector<float> spec_conf;  // a scoring proposer's probabilities for this step's drafts
  int32_t spec_idle_steps = 0;
  static constexpr int32_t kFirstProbeWait = 4;  // a probe costs one row; the doubling bounds a bad proposer's
  int32_t spec_probe_wait = kFirstProbeWait;
  // Structured output, this step: done_at, the picked token after which the document is complete
  // and nothing may follow (-1: none); forced_stop, nothing at all was allowed; trigger_at, the
  // picked token that started a lazy grammar (-1: none), whose text is shown even when it is a
  // control token.
  int32_t done_at = -1;
  bool forced_stop = false;
  int32_t trigger_at = -1;
  // Prompt scoring: prompt_lps[k] is prompt token k's logprob, from row k - 1 (filled in order, by
  // as many rows as each chunk brings; a recompute after preemption skips the ones done).
  std::vector<TokenLogprob> prompt_lps;
  int32_t next_scored = 1;
  bool prompt_done = false, prompt_lps_sent = false;
  EmbeddingPool pool;  // embeddings: the pooled rows so far
  int32_t pinned_blocks = 0;  // pin_kv: the prompt's full blocks pinned and reported so far
  int32_t adapter_slot = -1;  // the runner's slot of params.adapter (AdapterSlots), -1: none

  static constexpr double kAcceptPrior = 0.6;  // hopeful, so that the first requests try drafts
  static constexpr double kPriorWeight = 2;     // the prior (or the position before's rate) counts as 2 drafts
  static constexpr double kPooledWeight = 4;    // the pooled rate counts as this many of the request's own drafts

  Live(GenerationParams p, const Tokenizer& tok)
      : params(std::move(p)), sampler(params.sampling), decoder(tok, /*skip_special=*/true, /*continuation=*/true),
        stops(params.stop.stop_strings) {
    std::vector<int32_t> stop_ids(tok.eog_ids().begin(), tok.eog_ids().end());
    stop_ids.insert(stop_ids.end(), params.stop.stop_token_ids.begin(), params.stop.stop_token_ids.end());
    if (!params.logit_bias.empty()) processors.add(std::make_unique<LogitBias>(params.logit_bias));
    if (params.grammar) {
      auto g = std::make_unique<GrammarConstraint>(params.grammar, params.grammar_trigger, tok, stop_ids);
      grammar = g.get();
      processors.add(std::move(g));
    }
    if (params.stop.min_tokens > 0) processors.add(std::make_unique<MinTokens>(params.stop.min_tokens, stop_ids));
    if (params.prompt_logprobs >= 0) {
      prompt_lps.resize(params.prompt.size());
      prompt_lps[0] = {params.prompt[0], std::numeric_limits<float>::quiet_NaN(), 0, {}};
    }
  }
  // Which rows of a chunk [start, end) of a prompt of P tokens this request needs beyond sampling.
  bool scores_row(int32_t i, int32_t P) const { return params.prompt_logprobs >= 0 && i + 1 < P && i + 1 >= next_scored; }
  bool pools_row(int32_t i, int32_t P) const {
    switch (params.pooling) {
      case Pooling::none: return false;
      case Pooling::mean: return i < P && i >= pool.n_pooled();
      case Pooling::cls: return i == 0 && pool.n_pooled() == 0;
      case Pooling::last: return i == P - 1 && pool.n_pooled() == 0;
    }
    return false;
  }
};

}  // namespace detail

struct EngineCore::Impl {
  using Live = detail::Live;
  std::unique_ptr<runtime::ModelRunner> runner;
  AdapterSlots adapters;  // the LoRA adapters running requests name
  std::unique_ptr<KvTiering> tiering;  // the prefix cache's disk tier; null: none
  std::shared_ptr<ThreadPool> pool;  // where rows are sampled and scored
  const Tokenizer& tokenizer;
  EngineOptions options;
  int64_t n_vocab = 0;
  sched::Scheduler scheduler;
  std::unordered_map<RequestId, std::unique_ptr<Live>> live;
  std::vector<RequestId> aborted;
  RequestId next_id = 1;
  int32_t max_model_len = 0;
  // Step scratch, reused so a step allocates little.
  Batch batch;
  std::vector<sched::SeqOutput> outputs;
  std::vector<std::pair<const sched::ScheduledSeq*, const float*>> to_sample;
  // Per scheduled sequence: its rows' logits and hidden states beyond sampling.
  struct RowPlan {
    Live* live = nullptr;
    int32_t num_prompt = 0;
    int32_t score_from = 0, num_score = 0;  // prompt tokens [score_from, +num_score) are scored
    int32_t num_hidden = 0;                 // rows whose hidden state is pooled
    bool samples = false;
    // A proposer that drafts from hidden states gets the sampled rows' ones: the first at this
    // index of the forward's hidden rows (-1: none).
    int64_t draft_hidden = -1;
  };
  std::vector<RowPlan> plans;
  struct ScoreJob {
    Live* live;
    int32_t token_index;
    const float* logits;
  };
  std::vector<ScoreJob> to_score;
  EngineStats totals;
  int64_t spec_steps = 0;
  // Speculation's proposer (null: none); destroyed before the runner a self-draft shares.
  std::unique_ptr<spec::Proposer> proposer;
  std::vector<spec::DraftJob> draft_jobs;
  // The check on the controller's plans (spec::RealizedGain): the last step's forecast gain and
  // what it emitted, judged when the next step starts (a step's time runs from its start to the
  // next one's, draft forwards and the engine's work between steps included).
  spec::RealizedGain realized_gain;
  spec::AcceptanceRecord spec_pooled{0.995};  // every request's drafts: about the last 200 at each position
  // A scoring proposer's probabilities against what was kept, for greedy requests [0] and sampled
  // ones [1] (a sampled request keeps a greedy draft as often as it draws that token, not as often
  // as the target's argmax is that token).
  spec::ConfidenceCalibration spec_calibration[2];
  spec::ConfidenceCalibration& calibration_for(const Live& l) { return spec_calibration[l.params.sampling.temperature <= 0 ? 0 : 1]; }
  sched::Clock clock;
  struct SpecStep {
    int64_t start_ns = -1;
    double forecast_gain = 0;  // forecast tokens per time over the plain step's (0: no drafts planned)
    int32_t decodes = 0, tokens = 0;
    bool drafted = false, decodes_only = false;
  } spec_last;
  void note_spec_step(const sched::SchedulerOutput& so);
  void judge_last_step(int64_t now_ns);

  Impl(std::unique_ptr<runtime::ModelRunner> r, const Tokenizer& t, const EngineOptions& o, sched::Scheduler s,
       int32_t len)
      : runner(std::move(r)),
        tokenizer(t),
        options(o),
        n_vocab(runner->info().n_vocab),
        scheduler(std::move(s)),
        max_model_len(len) {}

  // The stages of a step (EngineCore::step).
  void build_batch(const sched::SchedulerOutput& so);
  void route_rows(const sched::SchedulerOutput& so, const float* logits);
  void pick_and_score();
  void emit_deltas(std::vector<Delta>& out);
  void pick_token(const sched::ScheduledSeq& seq, const float* logits);
  bool is_stop_token(const Live& l, int32_t t) const {
    if (!l.params.stop.ignore_eos && tokenizer.is_eog(t)) return true;
    return std::find(l.params.stop.stop_token_ids.begin(), l.params.stop.stop_token_ids.end(), t) !=
           l.params.stop.stop_token_ids.end();
  }
  void commit_token(const sched::ScheduledSeq& seq);
  void score_prompt_row(const ScoreJob& job) const;
  bool pin_progress(Live& l, RequestId id, int32_t n_tokens, Delta& d);
  void propose_drafts();
  // A decoding request the speculation controller may give draft rows.
  struct SpecCandidate {
    RequestId id;
    Live* live;
    std::vector<int32_t> draft;
    int32_t k = 0, most = 0;  // rows chosen; rows the proposer can fill
    int32_t left = 0;         // tokens the request may still generate beyond this step's own
  };
  void hand_hidden_to_proposer(const sched::SchedulerOutput& so);
  void draft_scheduled(const sched::SchedulerOutput& so);
  int64_t score_candidates(std::vector<SpecCandidate>& cands);
  Delta& delta_for(std::vector<Delta>& out, std::unordered_map<RequestId, size_t>& index, RequestId id);
};

}  // namespace kvasir::engine
