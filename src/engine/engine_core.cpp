// EngineCore: scheduler output -> ragged Batch -> ModelRunner -> per-request sampling, stop rules,
// detokenization -> Deltas.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>

#include "engine/engine_core_impl.h"
#include "kv/disk_store.h"
#include "kv/redis_store.h"
#include "sched/scheduler.h"
#include "spec/controller.h"

namespace kvasir::engine {
namespace {

// The prefix cache's salt of a request: its tenant's, and its adapter's (another adapter computes
// other KV for the same tokens).
std::string effective_salt(const GenerationParams& p) {
  return p.adapter ? p.cache_salt + "\x1f" + p.adapter->identity() : p.cache_salt;
}

bool reuses_prefix(const GenerationParams& p) {
  return !(p.prompt_logprobs >= 0 || p.pooling == Pooling::mean || p.pooling == Pooling::cls);
}


using detail::Live;

double ns_to_ms(int64_t ns) { return ns < 0 ? -1 : double(ns) / 1e6; }

Timings timings_of(const sched::Request& r) {
  Timings t;
  t.queue_ms = ns_to_ms(r.timings.queue_ns());
  t.ttft_ms = ns_to_ms(r.timings.ttft_ns());
  t.tpot_ms = ns_to_ms(r.timings.tpot_ns());
  t.e2e_ms = r.timings.finished_ns < 0 ? -1 : ns_to_ms(r.timings.finished_ns - r.timings.arrival_ns);
  return t;
}

}  // namespace

Result<std::unique_ptr<EngineCore>> EngineCore::create(std::unique_ptr<runtime::ModelRunner> runner,
                                                       const Tokenizer& tokenizer, const EngineOptions& o,
                                                       std::unique_ptr<runtime::ModelRunner> draft_runner,
                                                       std::vector<int32_t> draft_token_of_logit,
                                                       std::unique_ptr<spec::Proposer> head_proposer) {
  const runtime::RunnerInfo& info = runner->info();
  if (!(o.tpot_target_ms >= 0 && o.tpot_target_ms <= 1e6)) return Error{"tpot target must be in [0, 1e6] ms"};
  if (o.max_batch_tokens < 1 || o.max_seqs < 1 || o.max_seqs > o.max_batch_tokens)
    return Error{"need 1 <= max_seqs <= max_batch_tokens"};
  if (o.max_batch_tokens > info.max_batch_tokens) return Error{"max_batch_tokens exceeds what the runner takes"};
  const int32_t block_size = int32_t(info.block_size);
  if (block_size < 1) return Error{"the runner's KV block size must be >= 1"};
  if (tokenizer.n_vocab() > info.n_vocab) return Error{"the tokenizer has more tokens than the model's vocabulary"};
  const int64_t blocks = info.n_kv_blocks;
  if (blocks < 2 || blocks > (int64_t(1) << 30)) return Error{"the runner's KV storage must hold 2 to 2^30 blocks"};
  int32_t len = o.max_model_len > 0 ? o.max_model_len : int32_t(std::min<int64_t>(info.n_ctx_train, 1 << 30));
  len = int32_t(std::min<int64_t>(len, blocks * block_size));
  auto sched = sched::Scheduler::create({.max_batch_tokens = o.max_batch_tokens,
                                         .max_seqs = o.max_seqs,
                                         .block_size = block_size,
                                         .num_blocks = int32_t(blocks),
                                         .max_model_len = len,
                                         .enable_prefix_cache = o.prefix_cache,
                                         .tpot_slo_ns = int64_t(o.tpot_target_ms * 1e6),
                                         .reserve_kv = o.reserve_kv,
                                         .model_id = info.identity,
                                         .clock = o.clock});
  if (!sched) return Error{sched.error()};
  const bool model_drafts = o.spec.method == SpecMethod::draft || o.spec.method == SpecMethod::early_exit ||
                            o.spec.method == SpecMethod::layer_skip;
  if (model_drafts != bool(draft_runner))
    return Error{model_drafts ? "this speculation method needs a draft runner" : "a draft runner without a method that uses it",
                 ErrorCode::invalid_argument};
  const sched::Clock clock = o.clock ? o.clock : sched::Clock(sched::steady_now_ns);
  std::unique_ptr<spec::Proposer> proposer;
  if (draft_runner) {
    if (draft_runner->info().block_size != block_size) return Error{"the draft runner's KV block size differs from the target's"};
    const spec::KvMode kv_mode = o.spec.method == SpecMethod::draft ? spec::KvMode::own : spec::KvMode::target;
    auto p = spec::model_proposer(std::move(draft_runner), kv_mode, std::move(draft_token_of_logit), tokenizer.n_vocab(), clock);
    if (!p) return Error{p.error(), p.error_code()};
    proposer = std::move(*p);
  } else if (o.spec.method == SpecMethod::ngram) {
    proposer = spec::ngram_proposer();
  } else if (o.spec.method == SpecMethod::head) {
    if (!head_proposer) return Error{"--spec head needs the head's proposer (--draft-head-file)", ErrorCode::invalid_argument};
    proposer = std::move(head_proposer);
  }
  std::vector<std::shared_ptr<kv::BlockStore>> stores;
  if (!o.kv_disk_dir.empty() || !o.kv_store_url.empty()) {
    if (!o.prefix_cache) return Error{"the KV tiers need the prefix cache", ErrorCode::invalid_argument};
    if (runner->kv_block_bytes(0) == 0) return Error{"this runner has no KV block I/O for KV tiers", ErrorCode::invalid_argument};
  }
  const std::string format = runner->kv_format() + "/bs" + std::to_string(block_size);
  if (!o.kv_disk_dir.empty()) {
    auto d = kv::DiskStore::open({.dir = o.kv_disk_dir, .max_bytes = o.kv_disk_bytes, .format = format});
    if (!d) return Error{d.error(), d.error_code()};
    stores.push_back(std::move(*d));
  }
  if (!o.kv_store_url.empty()) {
    auto r = kv::RedisStore::open({.url = o.kv_store_url, .format = format});
    if (!r) return Error{r.error(), r.error_code()};
    stores.push_back(std::move(*r));
  }
  auto impl = std::make_unique<Impl>(std::move(runner), tokenizer, o, std::move(*sched), len);
  impl->proposer = std::move(proposer);
  if (!stores.empty()) {
    impl->tiering = std::make_unique<KvTiering>(std::move(stores), *impl->runner);
    (void)impl->scheduler.tier_kv().take_newly_cached();  // from now on the cache records new blocks
  }
  impl->pool = o.pool ? o.pool : std::make_shared<ThreadPool>(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  impl->clock = clock;
  return std::unique_ptr<EngineCore>(new EngineCore(std::move(impl)));
}

EngineCore::EngineCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EngineCore::~EngineCore() = default;
const Tokenizer& EngineCore::tokenizer() const { return impl_->tokenizer; }
bool EngineCore::has_unfinished() const { return impl_->scheduler.has_unfinished() || !impl_->aborted.empty(); }

Status EngineCore::validate(const GenerationParams& p) const {
  const int64_t n_vocab = impl_->n_vocab;
  if (p.prompt.empty()) return Error{"the prompt is empty"};
  for (int32_t id : p.prompt)
    if (id < 0 || id >= n_vocab) return Error{"token id " + std::to_string(id) + " is outside the vocabulary"};
  if (int64_t(p.prompt.size()) >= impl_->max_model_len)
    return Error{"context_length_exceeded: the prompt has " + std::to_string(p.prompt.size()) +
                 " tokens; this model's context is " + std::to_string(impl_->max_model_len) + " tokens"};
  const auto& s = p.sampling;
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature)) return Error{"temperature must be >= 0"};
  if (!(s.top_p > 0 && s.top_p <= 1)) return Error{"top_p must be in (0, 1]"};
  if (!(s.min_p >= 0 && s.min_p <= 1)) return Error{"min_p must be in [0, 1]"};
  if (!(s.repetition_penalty > 0) || !std::isfinite(s.repetition_penalty)) return Error{"repetition_penalty must be > 0"};
  if (!std::isfinite(s.presence_penalty) || !std::isfinite(s.frequency_penalty)) return Error{"penalties must be finite"};
  if (p.stop.max_tokens < 0) return Error{"max_tokens must be >= 0"};
  if (!(p.tenant_weight > 0) || !std::isfinite(p.tenant_weight)) return Error{"tenant_weight must be positive"};
  if (!(p.ttft_deadline_ms >= 0) || !std::isfinite(p.ttft_deadline_ms)) return Error{"ttft_deadline_ms must be >= 0"};
  if (p.stop.min_tokens < 0 || p.stop.min_tokens > p.stop.max_tokens) return Error{"min_tokens must be in [0, max_tokens]"};
  if (p.top_logprobs > 20) return Error{"top_logprobs must be <= 20"};
  if (p.logprob_tokens.size() > 20) return Error{"logprob_tokens holds at most 20 ids"};
  for (int32_t id : p.logprob_tokens)
    if (id < 0 || id >= n_vocab) return Error{"logprob_tokens has a bad token id"};
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > 20) return Error{"prompt_logprobs must be in [0, 20]"};
  if (p.pooling != Pooling::none) {
    if (p.stop.max_tokens != 0) return Error{"an embedding request generates nothing: max_tokens must be 0"};
    if (impl_->runner->info().n_embd <= 0) return Error{"this runner returns no hidden states", ErrorCode::invalid_argument};
  }
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || id >= n_vocab || !std::isfinite(bias)) return Error{"logit_bias has a bad token id or value"};
  for (int32_t id : p.stop.stop_token_ids)
    if (id < 0 || id >= n_vocab) return Error{"stop_token_ids has a bad token id"};
  if (p.grammar && int64_t(p.grammar->tokens->size()) != impl_->tokenizer.n_vocab())
    return Error{"the grammar was compiled for another vocabulary", ErrorCode::internal};
  return {};
}

Result<RequestId> EngineCore::add_request(GenerationParams params) {
  if (auto s = validate(params); !s) return Error{s.error()};
  // Stored blocks of the prompt join the prefix cache before the scheduler looks for them (read
  // here, on the thread that steps this core; Engine::submit reads them off it: prefetch_kv).
  if (impl_->tiering && reuses_prefix(params))
    impl_->tiering->load_prefix(impl_->scheduler.tier_kv(), params.prompt, effective_salt(params));
  const RequestId id = impl_->next_id++;
  if (auto s = add_request_with_id(id, std::move(params)); !s) return Error{s.error()};
  return id;
}

Status EngineCore::add_request_with_id(RequestId id, GenerationParams params) {
  Impl& m = *impl_;
  if (m.live.count(id)) return Error{"duplicate request id"};
  m.next_id = std::max(m.next_id, id + 1);
  // Scoring and mean / CLS pooling need rows the prefix cache would skip.
  const bool every_row = !reuses_prefix(params);
  int32_t slot = -1;
  if (params.adapter) {  // another adapter computes other KV for the same tokens
    auto acquired = m.adapters.acquire(*m.runner, params.adapter);
    if (!acquired) return Error{acquired.error(), acquired.error_code()};
    slot = *acquired;
    params.cache_salt = effective_salt(params);
  }
  sched::RequestOptions ro{.priority = params.priority, .max_new_tokens = params.stop.max_tokens,
                           .service_class = params.service_class, .tenant = params.tenant,
                           .tenant_weight = params.tenant_weight, .cache_salt = params.cache_salt, .prefill_only = params.stop.max_tokens == 0,
                           .reuse_prefix = !every_row};
  std::vector<int32_t> prompt = params.prompt;
  if (auto s = m.scheduler.add_request(id, std::move(prompt), std::move(ro)); !s) {
    m.adapters.release(*m.runner, slot);
    return s;
  }
  auto& l = m.live.emplace(id, std::make_unique<Live>(std::move(params), m.tokenizer)).first->second;
  l->adapter_slot = slot;
  return {};
}

void EngineCore::abort(RequestId id) {
  if (impl_->live.count(id)) impl_->aborted.push_back(id);
}

// Chooses seq's next tokens from its logits rows: one row, or with a draft one row per draft
// token plus one, verified in order (a draft token is kept with probability p(x) under exactly
// the distribution sampling would use; at the first rejection the token comes from p without it,
// which keeps the output distributed as without speculation; greedy keeps the longest prefix that
// matches the argmax). Touches only this request's state (its sampler and RNG) and per-thread
// scratch, so the rows of a step are picked in parallel; the choice does not depend on the thread.
void EngineCore::Impl::pick_token(const sched::ScheduledSeq& seq, const float* logits) {
  Live& l = *live.at(seq.id);
  const sched::Request* req = scheduler.find(seq.id);
  l.picked.clear();
  l.picked_logprobs.clear();
  const auto draft = seq.tokens.subspan(seq.tokens.size() - size_t(seq.num_draft));
  // Penalties see the sequence so far: the request's tokens, then the drafts kept before this row
  // (copied only when a draft is verified; a plain decode reads the request's tokens in place).
  std::span<const int32_t> history = req->tokens;
  thread_local std::vector<int32_t> with_drafts;
  l.done_at = -1;
  l.forced_stop = false;
  l.trigger_at = -1;
  for (int32_t j = 0; j <= seq.num_draft; ++j) {
    std::span<const float> row(logits + int64_t(j) * n_vocab, size_t(n_vocab));
    RowContext ctx{.n_generated = req->num_generated() + j};
    if (l.processors.active(ctx)) {  // the request's processors edit a copy of the row
      thread_local std::vector<float> edited;
      edited.assign(row.begin(), row.end());
      if (!l.processors.apply(edited, ctx)) {  // nothing may follow: the request ends here
        l.picked.push_back(tokenizer.eog_ids().empty() ? 0 : tokenizer.eog_ids()[0]);
        l.picked_logprobs.push_back({});
        l.forced_stop = true;
        return;
      }
      row = edited;
    }
    Distribution d = l.sampler.distribution(row, history);
    // Every row draws its position's token as a plain step would (Sampler::draw_at): a draft token
    // is kept exactly when it is that token, so the output is token for token the one without
    // speculation, whatever was drafted.
    const int32_t token = l.sampler.draw_at(d, int64_t(history.size()));
    const bool accepted = j < seq.num_draft && token == draft[size_t(j)];
    l.picked.push_back(token);
    if (l.params.top_logprobs >= 0)
      l.picked_logprobs.push_back(logprobs_of(row, token, l.params.top_logprobs, l.params.logprob_tokens));
    if (l.grammar && !is_stop_token(l, token)) {
      const GrammarConstraint::Step g = l.grammar->observe(token);
      const int32_t at = int32_t(l.picked.size() - 1);
      if (g.triggered) l.trigger_at = at;
      if (g.refused) {
        l.forced_stop = true;
        return;
      }
      if (g.done) {
        l.done_at = at;
        return;
      }
    }
    if (!accepted) break;
    if (j == 0) with_drafts.assign(req->tokens.begin(), req->tokens.end());
    with_drafts.push_back(token);
    history = with_drafts;
  }
}

// Stop rules, detokenization and the scheduler's output for the tokens pick_token chose, in
// order: a stop token or stop string inside an accepted run ends it exactly there.
void EngineCore::Impl::commit_token(const sched::ScheduledSeq& seq) {
  Live& l = *live.at(seq.id);
  sched::SeqOutput out{seq.id, -1, sched::FinishReason::None};
  for (size_t i = 0; i < l.picked.size(); ++i) {
    const int32_t token = l.picked[i];
    const bool last = i + 1 == l.picked.size();
    if (is_stop_token(l, token) || (l.forced_stop && last)) {
      out.finish = sched::FinishReason::Stop;
    } else {
      if (l.params.top_logprobs >= 0) l.new_logprobs.push_back(std::move(l.picked_logprobs[i]));
      l.new_tokens.push_back(token);
      l.new_text += l.stops.push(l.decoder.push(token));
      // A control token that starts a lazy grammar (Mistral's [TOOL_CALLS]) is part of the answer.
      if (int32_t(i) == l.trigger_at && tokenizer.is_special(token)) l.new_text += l.stops.push(tokenizer.piece(token));
      if (l.stops.stopped()) out.finish = sched::FinishReason::StopString;
      else if (int32_t(i) == l.done_at) out.finish = sched::FinishReason::Stop;  // the document is complete
    }
    if (last || out.finish != sched::FinishReason::None) {
      out.token = token;
      break;
    }
    out.accepted.push_back(token);
  }
  if (seq.num_draft > 0) {  // the controller learns where the draft stopped being accepted
    const size_t kept = l.picked.size() - 1;
    for (size_t j = 0; j <= kept && j < size_t(seq.num_draft); ++j) {
      l.spec_own.observe(j, j < kept);
      spec_pooled.observe(j, j < kept);
      if (j < l.spec_conf.size()) calibration_for(l).observe(j, l.spec_conf[j], j < kept);
    }
    // Every draft kept: the next position was not tried; its records fade (the request's fast,
    // the pooled one slowly, since other requests keep trying it).
    if (kept == size_t(seq.num_draft)) l.spec_own.fade(kept, 0.8), spec_pooled.fade(kept, 0.98);
  }
  outputs.push_back(std::move(out));
}

// Prompt token k's logprob (rank, alternatives) from the row before it.
void EngineCore::Impl::score_prompt_row(const ScoreJob& job) const {
  Live& l = *job.live;
  const size_t k = size_t(job.token_index);
  l.prompt_lps[k] = logprobs_of(std::span<const float>(job.logits, size_t(n_vocab)), l.params.prompt[k], l.params.prompt_logprobs);
}

Delta& EngineCore::Impl::delta_for(std::vector<Delta>& out, std::unordered_map<RequestId, size_t>& index, RequestId id) {
  auto it = index.find(id);
  if (it != index.end()) return out[it->second];
  index[id] = out.size();
  out.push_back(Delta{.id = id});
  return out.back();
}

// One step: schedule -> batch -> forward -> pick -> commit -> update, then the deltas.
Status EngineCore::step(std::vector<Delta>& out) {
  Impl& m = *impl_;
  for (RequestId id : m.aborted) (void)m.scheduler.abort(id);
  m.aborted.clear();

  m.propose_drafts();
  const sched::SchedulerOutput& so = m.scheduler.step();
  if (m.proposer && m.proposer->drafts_after_scheduling()) m.draft_scheduled(so);
  m.outputs.clear();
  if (!so.empty()) {
    m.build_batch(so);
    auto logits = m.runner->forward(m.batch);
    if (!logits) {
      // A failed forward leaves these requests' KV undefined: end them rather than serve garbage.
      for (const auto& seq : so.seqs) (void)m.scheduler.abort(seq.id);
      (void)m.scheduler.update({});
      return Error{"forward failed: " + logits.error()};
    }
    const auto bucket = std::lower_bound(std::begin(kIterationTokenBounds), std::end(kIterationTokenBounds), m.batch.size());
    ++m.totals.iteration_tokens[size_t(bucket - std::begin(kIterationTokenBounds))];
    m.totals.iteration_tokens_sum += m.batch.size();
    m.route_rows(so, *logits);
    m.pick_and_score();
    for (const auto& picked : m.to_sample) m.commit_token(*picked.first);
    for (const auto& o : m.outputs) m.totals.generation_tokens_total += 1 + int64_t(o.accepted.size());
    if (m.options.spec.method != SpecMethod::none) m.note_spec_step(so);
    if (auto s = m.scheduler.update(m.outputs); !s) return s;
    if (m.proposer && m.proposer->wants_hidden()) m.hand_hidden_to_proposer(so);
    if (m.tiering) m.tiering->save_new(m.scheduler.tier_kv());
  }
  m.emit_deltas(out);
  return {};
}

// The step's ragged batch: every scheduled sequence's rows, each marked for what it needs
// (logits to sample or score, a hidden state to pool).
void EngineCore::Impl::build_batch(const sched::SchedulerOutput& so) {
  batch.clear();
  plans.assign(so.seqs.size(), {});
  const bool draft_hidden = proposer && proposer->wants_hidden();
  int64_t hidden_rows = 0;
  for (size_t s = 0; s < so.seqs.size(); ++s) {
    const auto& seq = so.seqs[s];
    RowPlan& plan = plans[s];
    plan.live = live.at(seq.id).get();
    const Live& l = *plan.live;
    plan.num_prompt = int32_t(l.params.prompt.size());
    plan.samples = seq.want_logits && l.params.stop.max_tokens > 0;
    plan.score_from = l.next_scored;
    batch.add_sequence(*seq.block_table, l.adapter_slot);
    // With a draft every row is verified, so every row wants logits.
    const bool hidden_for_draft = draft_hidden && plan.samples && l.params.speculative;
    for (int32_t i = seq.start; i < seq.end; ++i) {
      const bool sample_row = plan.samples && (i + 1 == seq.end || seq.num_draft > 0);
      const bool score_row = l.scores_row(i, plan.num_prompt);
      const bool pool_row = l.pools_row(i, plan.num_prompt);
      const bool draft_row = hidden_for_draft && sample_row;
      if (draft_row && plan.draft_hidden < 0) plan.draft_hidden = hidden_rows;
      plan.num_score += score_row;
      plan.num_hidden += pool_row;
      hidden_rows += pool_row || draft_row;
      batch.add(seq.tokens[size_t(i - seq.start)], i, int32_t(s), sample_row || score_row, pool_row || draft_row);
    }
  }
}

// Hands the forward's rows to what wants them, in batch order: hidden states to the pools,
// logits rows to scoring and to sampling (queued for pick_and_score).
void EngineCore::Impl::route_rows(const sched::SchedulerOutput& so, const float* logits) {
  to_sample.clear();
  to_score.clear();
  int64_t logit_row = 0, hidden_row = 0;
  const int64_t n_embd = runner->info().n_embd;
  for (size_t s = 0; s < so.seqs.size(); ++s) {
    const auto& seq = so.seqs[s];
    RowPlan& plan = plans[s];
    Live& l = *plan.live;
    totals.prompt_tokens_total += std::max<int64_t>(0, std::min(seq.end, scheduler.find(seq.id)->num_prompt_tokens) - seq.start);
    for (int32_t k = 0; k < plan.num_score; ++k) to_score.push_back({&l, plan.score_from + k, logits + (logit_row++) * n_vocab});
    l.next_scored += plan.num_score;
    if (plan.num_hidden > 0) {
      l.pool.add(runner->hidden() + hidden_row * n_embd, plan.num_hidden, n_embd);
      hidden_row += plan.num_hidden;
    }
    if (plan.draft_hidden >= 0) hidden_row += 1 + seq.num_draft;
    if (seq.want_logits) l.prompt_done = true;
    if (!plan.samples) continue;
    to_sample.push_back({&seq, logits + logit_row * n_vocab});
    logit_row += 1 + seq.num_draft;
  }
}

// Sampling is per request (its own RNG) and scoring writes its own slot, so the rows are picked
// and scored in parallel on the engine's pool, then committed in batch order.
void EngineCore::Impl::pick_and_score() {
  const int64_t n_sample = int64_t(to_sample.size());
  pool->parallel_for(n_sample + int64_t(to_score.size()), 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      if (i < n_sample) pick_token(*to_sample[size_t(i)].first, to_sample[size_t(i)].second);
      else score_prompt_row(to_score[size_t(i - n_sample)]);
    }
  });
}

// Deltas: new tokens and text (and a pin_kv request's newly computed blocks), then the final
// delta of every finished request.
void EngineCore::Impl::emit_deltas(std::vector<Delta>& out) {
  std::unordered_map<RequestId, size_t> index;
  for (auto& [id, l] : live) {
    const bool lps_ready = l->params.prompt_logprobs >= 0 && l->prompt_done && !l->prompt_lps_sent;
    if (l->params.pin_kv) {
      const sched::Request* r = scheduler.find(id);
      Delta pinned;
      if (r && pin_progress(*l, id, r->num_computed_tokens, pinned)) {
        Delta& d = delta_for(out, index, id);
        d.kv_hold = pinned.kv_hold;
        d.kv_blocks = std::move(pinned.kv_blocks);
      }
    }
    if (l->new_tokens.empty() && l->new_text.empty() && !lps_ready) continue;
    Delta& d = delta_for(out, index, id);
    if (lps_ready) {
      d.prompt_logprobs = std::move(l->prompt_lps);
      l->prompt_lps_sent = true;
    }
    d.tokens = std::move(l->new_tokens);
    d.text = std::move(l->new_text);
    d.logprobs = std::move(l->new_logprobs);
    l->new_tokens.clear();
    l->new_text.clear();
    l->new_logprobs.clear();
  }
  for (sched::Request& r : scheduler.take_finished()) {
    if (proposer) proposer->release(r.id);
    auto it = live.find(r.id);
    if (it == live.end()) continue;
    Live& l = *it->second;
    Delta& d = delta_for(out, index, r.id);
    if (r.finish_reason != sched::FinishReason::StopString) d.text += l.stops.push(l.decoder.flush());
    d.text += l.stops.flush();
    d.finish = r.finish_reason;
    if (l.params.pooling != Pooling::none && l.prompt_done) d.embedding = l.pool.unit_mean();
    if (l.params.pin_kv && r.finish_reason == sched::FinishReason::Length)
      pin_progress(l, r.id, int32_t(l.params.prompt.size()), d);
    d.usage = {r.num_prompt_tokens, r.num_generated(), r.num_cached_tokens};
    d.timings = timings_of(r);
    adapters.release(*runner, l.adapter_slot);
    live.erase(it);
  }
}

// A pin_kv request's prompt blocks, pinned as its prefill computes them (so that they can be
// shipped while the rest of the prompt runs): when the first n_tokens of the prompt hold more
// full blocks than were pinned, the hold moves to the longer run of cached blocks (release and
// pin in one call on the engine's thread, so nothing can evict them in between; only computed
// blocks are cached) and the delta names the hold and every pinned block. Ids reported before
// never change: the old pin kept those blocks cached under their hashes.
bool EngineCore::Impl::pin_progress(Live& l, RequestId id, int32_t n_tokens, Delta& d) {
  const int32_t block = scheduler.kv().block_size();
  const int32_t full = std::min(n_tokens, int32_t(l.params.prompt.size())) / block;
  if (full <= l.pinned_blocks) return false;
  const int64_t hold = -(int64_t(1) << 40) - id;
  scheduler.release_kv(hold);
  const auto prefix = std::span<const int32_t>(l.params.prompt).first(size_t(full) * size_t(block));
  auto pinned = scheduler.pin_prefix(hold, prefix, l.params.cache_salt);
  if (!pinned || int32_t(pinned->size()) <= l.pinned_blocks) return false;
  l.pinned_blocks = int32_t(pinned->size());
  d.kv_hold = hold;
  d.kv_blocks = std::move(*pinned);
  return true;
}

runtime::ModelRunner& EngineCore::runner() { return *impl_->runner; }

void EngineCore::prefetch_kv(const GenerationParams& params,
                             const std::function<void(const std::function<void()>&)>& on_engine_thread) {
  KvTiering* t = impl_->tiering.get();
  if (!t || !reuses_prefix(params)) return;
  const std::string salt = effective_salt(params);
  KvTiering::Plan plan;
  on_engine_thread([&] { plan = t->plan(impl_->scheduler.tier_kv(), params.prompt, salt); });
  if (plan.hashes.empty()) return;
  KvTiering::Read read = t->read(plan, params.prompt, salt);
  if (read.blocks.empty()) return;
  on_engine_thread([&] { t->count_prefetched(t->import(impl_->scheduler.tier_kv(), params.prompt, salt, std::move(read))); });
}

Result<sched::Scheduler::KvReservation> EngineCore::reserve_kv(int64_t hold_id, std::span<const int32_t> tokens,
                                                               const std::string& salt) {
  if (hold_id <= -(int64_t(1) << 40)) return Error{"hold ids below -2^40 are the engine's pins", ErrorCode::invalid_argument};
  return impl_->scheduler.reserve_prefix(hold_id, tokens, salt);
}

Status EngineCore::commit_kv(int64_t hold_id, std::span<const int32_t> tokens) {
  return impl_->scheduler.commit_reserved(hold_id, tokens);
}

void EngineCore::release_kv(int64_t hold_id) { impl_->scheduler.release_kv(hold_id); }

sched::QueueLoad EngineCore::load() const { return impl_->scheduler.load(); }

EngineStats EngineCore::stats() const {
  const Impl& m = *impl_;
  EngineStats s = m.totals;
  s.num_running = m.scheduler.num_running();
  s.num_waiting = m.scheduler.num_waiting();
  const auto& kv = m.scheduler.kv();
  s.kv_blocks_total = m.runner->info().n_kv_blocks;
  s.kv_blocks_used = kv.num_blocks() - kv.num_free_blocks();  // cached-but-unreferenced blocks count as free
  const auto& pc = kv.cache().counters();
  s.prefix_queries = pc.num_queries;
  s.prefix_query_tokens = pc.num_query_tokens;
  s.prefix_hits = pc.num_hits;
  s.prefix_hit_tokens = pc.num_hit_tokens;
  s.prefix_evictions = pc.num_evictions;
  s.num_preemptions = m.scheduler.counters().num_preemptions;
  s.num_yields = m.scheduler.counters().num_yields;
  s.num_prefill_held = m.scheduler.counters().num_prefill_held;
  s.num_steps = m.scheduler.counters().num_steps;
  s.kv_layers = m.runner->info().n_layers;
  s.kv_quantized_layers = m.runner->info().n_quantized_kv_layers;
  s.spec_drafts = m.scheduler.counters().num_drafts;
  s.spec_draft_tokens = m.scheduler.counters().num_draft_tokens;
  s.spec_accepted_tokens = m.scheduler.counters().num_accepted_tokens;
  if (m.options.spec.method != SpecMethod::none) {
    const auto& c = m.scheduler.counters();
    const size_t k = std::min(size_t(std::max(m.options.spec.max_k, 0)), c.draft_tokens_at.size());
    s.spec_draft_tokens_at.assign(c.draft_tokens_at.begin(), c.draft_tokens_at.begin() + k);
    s.spec_accepted_tokens_at.assign(c.accepted_tokens_at.begin(), c.accepted_tokens_at.begin() + k);
  }
  if (m.proposer) {
    s.draft_kv_blocks_total = m.proposer->n_blocks();
    s.draft_kv_blocks_used = m.proposer->n_blocks() - m.proposer->n_free_blocks();
  }
  s.max_model_len = m.max_model_len;
  s.max_seqs = m.options.max_seqs;
  if (m.tiering) {
    const KvTierCounters& t = m.tiering->counters();
    for (size_t i = 0; i < m.tiering->stores().size(); ++i) {
      const kv::BlockStore& store = *m.tiering->stores()[i];
      s.kv_tiers.push_back({store.tier(), store.pool_id(), t.loaded_blocks[i], store.counters()});
    }
    s.kv_tier_loads = t.loads, s.kv_tier_load_ns = t.load_ns, s.kv_tier_saved_blocks = t.saved_blocks;
    s.kv_tier_prefetched_blocks = t.prefetched_blocks;
  }
  return s;
}

}  // namespace kvasir::engine
