// EngineCore's private state, shared by the files that implement it: engine_core.cpp (the step:
// batch, forward, sampling, stop rules, deltas) and engine_spec.cpp (speculation: drafts, the
// controller and its check). Not part of the engine's interface.
#pragma once
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/stop_matcher.h"
#include "sched/scheduler.h"
#include "spec/controller.h"
#include "spec/model_drafter.h"

namespace kvasir::engine {
namespace detail {

// Per-request state the scheduler does not hold: sampling, text and stop rules.
struct Live {
  GenerationParams params;
  Sampler sampler;
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
  // Speculation controller: per draft position j, the rate at which draft token j is accepted
  // when the ones before it were (moving averages: acceptance falls with depth), for the positions
  // verified so far (a prefix: position j is seen only when 0..j-1 were accepted; deeper ones are
  // planned at the deepest seen one's rate, and a new position starts from it), and steps since
  // the last draft, so that a request whose drafts stopped paying is probed again now and then:
  // after spec_probe_wait steps, which doubles with each probe (up to 256) and falls back to 16
  // once the plan drafts for it again, so that a proposer that never pays costs ever fewer probes.
  std::vector<double> spec_accept;
  int32_t spec_idle_steps = 0;
  int32_t spec_probe_wait = 16;
  // Structured output: the grammar's state after the tokens picked so far (pick_token advances
  // it over exactly the tokens it keeps). done_at: the picked token after which the document is
  // complete and nothing may follow (-1: none); forced_stop: nothing at all was allowed.
  std::optional<grammar::Matcher> matcher;
  int32_t done_at = -1;
  bool forced_stop = false;
  // Lazy grammar: the output's last bytes, searched for the trigger; trigger_at: the picked token
  // that completed it this step (-1: none), whose text is shown even when it is a control token.
  std::string trigger_tail;
  int32_t trigger_at = -1;
  bool trigger_failed = false;
  // Prompt scoring: prompt_lps[k] is prompt token k's logprob, from row k - 1 (filled in order, by
  // as many rows as each chunk brings; a recompute after preemption skips the ones done).
  std::vector<TokenLogprob> prompt_lps;
  int32_t next_scored = 1;
  bool prompt_done = false, prompt_lps_sent = false;
  // Embeddings: the sum of the pooled rows' hidden states so far (rows 0..pooled-1 for mean).
  std::vector<double> pool_sum;
  int32_t pooled = 0;

  static constexpr double kAcceptPrior = 0.6;  // hopeful, so that a new request tries drafts
  double& accept_rate(size_t j) {
    if (spec_accept.size() <= j) spec_accept.resize(j + 1, spec_accept.empty() ? kAcceptPrior : spec_accept.back());
    return spec_accept[j];
  }

  Live(GenerationParams p, const Tokenizer& tok)
      : params(std::move(p)), sampler(params.sampling), decoder(tok, /*skip_special=*/true, /*continuation=*/true),
        stops(params.stop.stop_strings) {
    if (params.grammar && params.grammar_trigger.empty()) matcher.emplace(params.grammar);
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
      case Pooling::mean: return i < P && i >= pooled;
      case Pooling::cls: return i == 0 && pooled == 0;
      case Pooling::last: return i == P - 1 && pooled == 0;
    }
    return false;
  }
};

}  // namespace detail

struct EngineCore::Impl {
  using Live = detail::Live;
  std::unique_ptr<runtime::ModelRunner> runner;
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
  // Model drafting (draft model, early exit, layer skip); destroyed before the runner it may share.
  std::unique_ptr<spec::ModelDrafter> drafter;
  std::vector<spec::DraftJob> draft_jobs;
  spec::DraftCostModel draft_cost;  // what the draft model's forwards take (model drafting)
  // The check on the controller's plans (spec::RealizedGain): the last step's forecast gain and
  // what it emitted, judged when the next step starts (a step's time runs from its start to the
  // next one's, draft forwards and the engine's work between steps included).
  spec::RealizedGain realized_gain;
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

  void pick_token(const sched::ScheduledSeq& seq, const float* logits);
  bool is_stop_token(const Live& l, int32_t t) const {
    if (!l.params.stop.ignore_eos && tokenizer.is_eog(t)) return true;
    return std::find(l.params.stop.stop_token_ids.begin(), l.params.stop.stop_token_ids.end(), t) !=
           l.params.stop.stop_token_ids.end();
  }
  bool apply_grammar(grammar::Matcher& m, bool mask_stops, std::span<const int32_t> stop_ids, std::vector<float>& row) const;
  void watch_trigger(Live& l, int32_t token) const;
  void commit_token(const sched::ScheduledSeq& seq);
  void score_prompt_row(const ScoreJob& job) const;
  static void pool_rows(Live& l, const float* rows, int32_t n, int64_t n_embd);
  static std::vector<float> pooled_embedding(const Live& l);
  void propose_drafts();
  // A decoding request the speculation controller may give draft rows.
  struct SpecCandidate {
    RequestId id;
    Live* live;
    std::vector<int32_t> draft;
    int32_t k = 0, most = 0;  // rows chosen; rows the proposer can fill
    int32_t left = 0;         // tokens the request may still generate beyond this step's own
  };
  void draft_scheduled(const sched::SchedulerOutput& so);
  Delta& delta_for(std::vector<Delta>& out, std::unordered_map<RequestId, size_t>& index, RequestId id);
};

}  // namespace kvasir::engine
