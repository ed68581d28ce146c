#include "sched/scheduler.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <tuple>

namespace kvasir::sched {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Whether a goes before b: a better class, or the same class and a lower priority value.
bool outranks(const Request& a, const Request& b) {
  if (a.options.service_class != b.options.service_class) return a.options.service_class < b.options.service_class;
  return a.options.priority < b.options.priority;
}

}  // namespace

Result<Scheduler> Scheduler::create(SchedulerConfig config) {
  if (config.num_blocks <= 0) return Error{"scheduler: num_blocks must be positive, got " + str(config.num_blocks)};
  if (config.block_size <= 0) return Error{"scheduler: block_size must be positive, got " + str(config.block_size)};
  if (config.max_batch_tokens <= 0 || config.max_seqs <= 0) {
    return Error{"scheduler: max_batch_tokens and max_seqs must be positive"};
  }
  // Otherwise some running decode could miss every step and never finish.
  if (config.max_seqs > config.max_batch_tokens) {
    return Error{"scheduler: max_seqs (" + str(config.max_seqs) + ") exceeds max_batch_tokens (" +
                 str(config.max_batch_tokens) + ")"};
  }
  const int64_t pool_tokens = int64_t(config.num_blocks) * config.block_size;
  if (config.max_model_len == 0) config.max_model_len = int32_t(std::min<int64_t>(pool_tokens, INT32_MAX));
  // A sequence the pool cannot hold alone would preempt itself forever.
  if (config.max_model_len < 2 || config.max_model_len > pool_tokens) {
    return Error{"scheduler: max_model_len " + str(config.max_model_len) + " must be in [2, num_blocks * block_size = " +
                 str(pool_tokens) + "]"};
  }
  if (config.max_chunk_tokens < 0) return Error{"scheduler: max_chunk_tokens must be >= 0"};
  if (!config.clock) config.clock = steady_now_ns;
  auto kv = kv::KvManager::create({.num_blocks = config.num_blocks,
                                   .block_size = config.block_size,
                                   .enable_prefix_cache = config.enable_prefix_cache,
                                   .model_id = config.model_id,
                                   .hasher = config.hasher});
  if (!kv) return Error{"scheduler: " + kv.error()};
  return Scheduler(std::move(config), std::move(kv).value());
}

Scheduler::Scheduler(SchedulerConfig config, kv::KvManager kv) : config_(std::move(config)), kv_(std::move(kv)) {
  out_.seqs.reserve(size_t(config_.max_seqs));
  candidates_.reserve(size_t(config_.max_seqs));
}

Status Scheduler::add_request(RequestId id, std::vector<int32_t> prompt, RequestOptions options) {
  if (requests_.count(id)) return Error{"request " + str(id) + " already exists"};
  if (prompt.empty()) return Error{"request " + str(id) + ": empty prompt"};
  if (int64_t(prompt.size()) >= config_.max_model_len) {
    return Error{"request " + str(id) + ": prompt of " + str(int64_t(prompt.size())) +
                 " tokens leaves no room to generate within max_model_len " + str(config_.max_model_len)};
  }
  if (options.max_new_tokens < 0) return Error{"request " + str(id) + ": max_new_tokens must be >= 0"};
  if (!(options.tenant_weight > 0)) return Error{"request " + str(id) + ": tenant_weight must be positive"};
  auto r = std::make_unique<Request>();
  r->id = id;
  r->num_prompt_tokens = int32_t(prompt.size());
  r->tokens = std::move(prompt);
  if (options.max_new_tokens > 0) {
    // Tokens are appended every step; one allocation now instead of several later.
    r->tokens.reserve(size_t(std::min<int64_t>(config_.max_model_len,
                                               int64_t(r->num_prompt_tokens) + options.max_new_tokens)));
  }
  r->options = std::move(options);
  r->arrival_seq = next_arrival_seq_++;
  r->timings.arrival_ns = now();
  waiting_.push(r.get());
  requests_.emplace(id, std::move(r));
  return {};
}

Status Scheduler::set_draft(RequestId id, std::span<const int32_t> draft) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return Error{"set_draft: unknown request " + str(id)};
  if (awaiting_update_) return Error{"set_draft: a step is waiting for its update"};
  if (it->second->options.prefill_only && !draft.empty()) return Error{"set_draft: request " + str(id) + " generates nothing"};
  it->second->draft.assign(draft.begin(), draft.end());
  return {};
}

Status Scheduler::fill_draft(RequestId id, std::span<const int32_t> draft) {
  if (!awaiting_update_) return Error{"fill_draft: no step is waiting for its update"};
  auto seq = std::find_if(out_.seqs.begin(), out_.seqs.end(), [&](const ScheduledSeq& s) { return s.id == id; });
  auto req = requests_.find(id);
  if (seq == out_.seqs.end() || req == requests_.end() || seq->num_draft == 0)
    return Error{"fill_draft: request " + str(id) + " has no draft rows in this step"};
  if (int32_t(draft.size()) > seq->num_draft)
    return Error{"fill_draft: " + str(int64_t(draft.size())) + " draft tokens for " + str(seq->num_draft) + " rows"};
  Request* r = req->second.get();
  const int32_t k = int32_t(draft.size()), dropped = seq->num_draft - k;
  r->step_tokens.resize(size_t(1 + k));
  std::copy(draft.begin(), draft.end(), r->step_tokens.begin() + 1);
  seq->tokens = r->step_tokens;
  if (dropped > 0) {
    for (int32_t j = k; j < seq->num_draft && size_t(j) < counters_.draft_tokens_at.size(); ++j)
      --counters_.draft_tokens_at[size_t(j)];
    counters_.num_draft_tokens -= dropped;
    if (k == 0) --counters_.num_drafts;
    seq->num_draft = k;
    seq->end -= dropped;
    out_.num_tokens -= dropped;
    counters_.num_scheduled_tokens -= dropped;
    step_draft_rows_ -= dropped;
    r->num_computed_tokens = seq->end;
    kv_.seq_truncate(id, seq->end);
  }
  return {};
}

int32_t Scheduler::chunk_limit(int32_t remaining, int32_t budget) const {
  int32_t n = std::min(remaining, budget);
  if (config_.max_chunk_tokens > 0) n = std::min(n, config_.max_chunk_tokens);
  return n;
}

const SchedulerOutput& Scheduler::step() {
  if (awaiting_update_) return out_;  // the caller has not reported the last step yet
  // A step's cost is the time from its start to the next one: the forward, sampling and what the
  // engine does between steps (streaming, new requests), all of which the decodes wait for.
  // Intervals that may hold idle time (nothing was running) are not observed.
  const int64_t t0 = now();
  if (last_step_busy_ && !running_.empty())
    cost_.observe(t0 - step_start_ns_ - excluded_ns_, step_decodes_, step_prefill_tokens_, step_draft_rows_);
  excluded_ns_ = 0;
  out_.seqs.clear();
  out_.preempted.clear();
  out_.num_tokens = 0;
  preempted_this_step_ = false;
  ++counters_.num_steps;
  int32_t budget = config_.max_batch_tokens;

  // Decodes first, then running prefills; running_ is in admission order. Requests with nothing
  // left to compute are waiting for a token from update() and are skipped.
  candidates_.clear();
  for (Request* r : running_) {
    if (r->num_tokens() - r->num_computed_tokens == 1) candidates_.push_back(r);
  }
  for (Request* r : candidates_) {
    if (budget == 0) break;
    if (r->state == RequestState::Running) schedule_running(r, &budget);  // may have been preempted
  }
  step_decodes_ = int32_t(out_.seqs.size());
  step_draft_rows_ = 0;
  for (const ScheduledSeq& q : out_.seqs) step_draft_rows_ += q.num_draft;
  for (Request* r : running_) r->draft.clear();  // used above or dropped: the next step proposes anew
  candidates_.clear();
  for (Request* r : running_) {
    if (r->num_tokens() - r->num_computed_tokens > 1) candidates_.push_back(r);
  }
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [](const Request* a, const Request* b) { return outranks(*a, *b); });
  // Prefill chunks (running ones, then admissions) share what is left, under the TPOT target;
  // after kMaxHeldSteps steps without any, one small chunk goes regardless.
  const bool prefill_pending = !candidates_.empty() || (!waiting_.empty() && !preempted_this_step_);
  force_progress_ = held_steps_ >= kMaxHeldSteps;
  int32_t prefill_budget = std::min(budget, force_progress_ ? kMinPrefillChunk : prefill_cap());
  const int32_t decode_tokens = out_.num_tokens;
  // Admitting while preempting for blocks would only thrash.
  for (Request* r : candidates_) {
    if (prefill_budget == 0) break;
    if (!preempted_this_step_) admit_waiting(&prefill_budget, r);  // those that outrank r go first
    if (prefill_budget > 0 && r->state == RequestState::Running) schedule_running(r, &prefill_budget);
  }
  if (!preempted_this_step_) admit_waiting(&prefill_budget);

  step_prefill_tokens_ = out_.num_tokens - decode_tokens;
  if (config_.tpot_slo_ns > 0 && prefill_pending && step_prefill_tokens_ == 0 && step_decodes_ > 0) {
    ++held_steps_;  // the target held every prompt back
    ++counters_.num_prefill_held;
  } else {
    held_steps_ = 0;
  }
  counters_.num_scheduled_tokens += out_.num_tokens;
  awaiting_update_ = !out_.seqs.empty();
  last_step_busy_ = awaiting_update_;
  step_start_ns_ = t0;
  return out_;
}

int32_t Scheduler::prefill_cap() const {
  constexpr int32_t kNoCap = INT32_MAX;
  const double base = cost_.decode_time(step_decodes_);
  // Until both costs are measured, nothing is held.
  if (config_.tpot_slo_ns <= 0 || step_decodes_ == 0 || base < 0 || !cost_.has_prefill()) return kNoCap;
  // The step may take as long as the most pressed decoding sequence can absorb: after k tokens,
  // the first at t0, its next must come by t0 + k * target to keep its mean within the target.
  const int64_t t = now();
  int64_t allowed = INT64_MAX;
  for (Request* r : running_) {
    const auto& ts = r->timings.token_ns;
    if (ts.empty() || r->num_computed_tokens < r->num_tokens()) continue;  // not decoding this step
    allowed = std::min(allowed, int64_t(ts.size()) * config_.tpot_slo_ns - (t - ts.front()));
  }
  if (allowed == INT64_MAX) return kNoCap;
  const double tokens = (double(allowed) - base) / std::max(cost_.prefill_token_ns(), 1.0);
  return tokens >= kMinPrefillChunk ? int32_t(std::min(tokens, double(kNoCap))) : 0;
}

void Scheduler::schedule_running(Request* r, int32_t* budget) {
  const int32_t want = chunk_limit(r->num_tokens() - r->num_computed_tokens, *budget);
  int32_t fit = kv_.seq_capacity(r->id) - r->num_computed_tokens;
  while (fit < 1) {
    Request* victim = pick_victim();
    preempt(victim, budget);
    if (victim == r) return;
    fit = kv_.seq_capacity(r->id) - r->num_computed_tokens;
  }
  // A prefill chunk shrinks to what fits rather than preempting someone.
  const int32_t n = std::min(want, fit);
  const int32_t k = n == 1 && r->num_tokens() - r->num_computed_tokens == 1 ? draft_room(*r, *budget, fit) : 0;
  const bool ok = kv_.seq_allocate(r->id, r->num_computed_tokens + n + k);
  assert(ok);
  (void)ok;
  emit(r, n, budget, k);
}

// How many of a decoding request's draft tokens fit this step: within the budget and the free
// blocks (a draft never preempts), and short of the context and max_new_tokens by the one token
// that verification always adds.
int32_t Scheduler::draft_room(const Request& r, int32_t budget, int32_t fit) const {
  int32_t k = std::min({int32_t(r.draft.size()), budget - 1, fit - 1, config_.max_model_len - r.num_tokens() - 1});
  if (r.options.max_new_tokens > 0) k = std::min(k, r.options.max_new_tokens - r.num_generated() - 1);
  return std::max(k, 0);
}

void Scheduler::admit_waiting(int32_t* budget, const Request* bound) {
  while (*budget > 0 && !waiting_.empty()) {
    if (bound && !outranks(*waiting_.front(), *bound)) break;
    // The fairest tenant's oldest request first. When it finds no seat (its tenant holds its
    // share), the next tenant's may still take one by fair share; blocks are waited for in order.
    bool admitted = false;
    for (Request* r : waiting_.heads()) {
      const Admission a = admit(r, budget);
      admitted = a == Admission::admitted;
      if (a != Admission::no_seat) break;
    }
    if (!admitted) break;
  }
}

// Whether a sequence may join the running set: a seat under max_seqs and, under a TPOT target, a
// decode step of one more sequence within the target (on a slow machine the target caps
// concurrency; after kMaxHeldSteps one more goes regardless).
bool Scheduler::seat_free() const {
  if (running_.empty()) return true;
  if (int32_t(running_.size()) >= config_.max_seqs) return false;
  return config_.tpot_slo_ns <= 0 || force_progress_ ||
         cost_.decode_time(int32_t(running_.size()) + 1) <= double(config_.tpot_slo_ns);
}

int32_t Scheduler::seats() const {
  if (config_.tpot_slo_ns <= 0) return config_.max_seqs;
  int32_t n = 1;
  while (n < config_.max_seqs && cost_.decode_time(n + 1) <= double(config_.tpot_slo_ns)) ++n;
  return n;
}

// A request's length when it ends at the latest.
int32_t Scheduler::final_length(const Request& r) const {
  if (r.options.prefill_only) return r.num_prompt_tokens;
  if (r.options.max_new_tokens == 0) return config_.max_model_len;
  return int32_t(std::min<int64_t>(int64_t(r.num_prompt_tokens) + r.options.max_new_tokens, config_.max_model_len));
}

bool Scheduler::kv_reserved_for(const Request& r, const kv::PrefixHit& hit) const {
  if (!config_.reserve_kv) return true;
  int64_t committed = 0;  // blocks the running requests may still take
  for (const Request* x : running_)
    committed += std::max<int64_t>(0, kv_.blocks_for(final_length(*x)) - int64_t(kv_.seq_blocks(x->id).size()));
  int64_t hit_free = 0;  // cached blocks nobody references: counted as free, taken by the hit
  for (kv::BlockId b : hit.blocks) hit_free += kv_.pool().is_free(b) ? 1 : 0;
  const int64_t need = kv_.blocks_for(final_length(r)) - int64_t(hit.blocks.size());
  return committed + need + hit_free <= kv_.num_free_blocks();
}

Scheduler::Admission Scheduler::admit(Request* r, int32_t* budget) {
  // Preempted in this step: it comes back in a later one (the step's candidates still point at it).
  if (std::find(out_.preempted.begin(), out_.preempted.end(), r->id) != out_.preempted.end()) return Admission::no_seat;
  const std::string& salt = r->options.cache_salt;
  kv::PrefixHit hit;
  int32_t n = 0;
  while (true) {
    // A preempted request comes back here too: its prompt and generated tokens are recomputed,
    // mostly from its own blocks if they are still cached.
    hit = r->options.reuse_prefix ? kv_.find_prefix(r->tokens, salt) : kv::PrefixHit{};
    n = chunk_limit(r->num_tokens() - hit.num_tokens, *budget);
    const bool seat = seat_free();
    if (seat && kv_reserved_for(*r, hit) && kv_.seq_admit(r->id, hit, n, salt, r->num_tokens())) break;
    // No seat or no blocks: one that r outranks gives up its own (a yield, not a thrash: the
    // victim cannot take them back while r runs).
    Request* victim = yield_victim(*r);
    if (!victim) return seat ? Admission::no_blocks : Admission::no_seat;
    const bool preempted_before = preempted_this_step_;
    preempt(victim, budget);
    preempted_this_step_ = preempted_before;
    ++counters_.num_yields;
  }
  waiting_.admitted(r);  // not front(): a request that yielded to r may be ahead of it now
  r->state = RequestState::Running;
  r->admit_seq = next_admit_seq_++;
  r->num_computed_tokens = hit.num_tokens;
  r->num_cached_tokens = hit.num_tokens;
  if (r->timings.first_scheduled_ns < 0) r->timings.first_scheduled_ns = now();
  running_.push_back(r);
  ++counters_.num_admitted;
  emit(r, n, budget);
  return Admission::admitted;
}

void Scheduler::emit(Request* r, int32_t num_tokens, int32_t* budget, int32_t num_draft) {
  ScheduledSeq s;
  s.id = r->id;
  s.start = r->num_computed_tokens;
  s.end = s.start + num_tokens + num_draft;
  s.tokens = std::span<const int32_t>(r->tokens).subspan(size_t(s.start), size_t(num_tokens));
  if (num_draft > 0) {  // the last token, then the draft: rows of their own
    r->step_tokens.assign(s.tokens.begin(), s.tokens.end());
    r->step_tokens.insert(r->step_tokens.end(), r->draft.begin(), r->draft.begin() + num_draft);
    s.tokens = r->step_tokens;
    ++counters_.num_drafts;
    counters_.num_draft_tokens += num_draft;
    for (int32_t j = 0; j < num_draft && size_t(j) < counters_.draft_tokens_at.size(); ++j) ++counters_.draft_tokens_at[size_t(j)];
  }
  const int32_t prompt_rows = std::clamp(r->num_prompt_tokens - s.start, 0, num_tokens);
  waiting_.charge(r->options.tenant, r->options.tenant_weight, prompt_rows, num_tokens + num_draft - prompt_rows);
  s.block_table = &kv_.seq_blocks(r->id);
  s.want_logits = s.end >= r->num_tokens();
  s.num_draft = num_draft;
  out_.seqs.push_back(s);
  out_.num_tokens += num_tokens + num_draft;
  r->num_computed_tokens = s.end;
  *budget -= num_tokens + num_draft;
}

Request* Scheduler::pick_victim() const {
  // Lowest priority (largest value) first, then the most recently admitted.
  Request* victim = nullptr;
  for (Request* r : running_) {
    if (!victim || r->options.priority > victim->options.priority ||
        (r->options.priority == victim->options.priority && r->admit_seq > victim->admit_seq)) {
      victim = r;
    }
  }
  return victim;
}

Request* Scheduler::yield_victim(const Request& r) const {
  Request* victim = pick_victim();
  if (victim && outranks(r, *victim)) return victim;
  return fair_share_victim(r);
}

// Seats are shared by weight too: when r's tenant holds fewer seats of r's level than its share
// even with r, and another tenant holds more than its own, that tenant's most recent request
// yields. Without it a tenant that filled every seat keeps them while it floods, and everyone
// else waits for its requests to end. The victim's blocks stay in the prefix cache, so its
// recompute is mostly hits.
Request* Scheduler::fair_share_victim(const Request& r) const {
  struct Held {
    int32_t seats = 0;
    double weight = 1;
    Request* newest = nullptr;
  };
  std::unordered_map<std::string_view, Held> held;
  int32_t level_seats = 0;
  for (Request* x : running_) {
    if (outranks(*x, r) || outranks(r, *x)) continue;
    Held& h = held[x->options.tenant];
    ++h.seats;
    h.weight = x->options.tenant_weight;
    if (!h.newest || x->admit_seq > h.newest->admit_seq) h.newest = x;
    ++level_seats;
  }
  if (level_seats == 0 || held.count(r.options.tenant) == held.size()) return nullptr;
  held[r.options.tenant].weight = r.options.tenant_weight;
  double total_weight = 0;
  for (const auto& [tenant, h] : held) total_weight += h.weight;
  auto share = [&](const Held& h) { return double(level_seats) * h.weight / total_weight; };
  if (double(held[r.options.tenant].seats + 1) > share(held[r.options.tenant])) return nullptr;
  Request* victim = nullptr;
  double most_over = 0;
  for (const auto& [tenant, h] : held) {
    const double over = double(h.seats) - share(h);
    if (tenant != r.options.tenant && over >= 1.0 && over > most_over) {
      most_over = over;
      victim = h.newest;
    }
  }
  return victim;
}

void Scheduler::preempt(Request* victim, int32_t* budget) {
  // Already scheduled in this step: take the chunk back.
  for (auto it = out_.seqs.begin(); it != out_.seqs.end(); ++it) {
    if (it->id == victim->id) {
      *budget += it->end - it->start;
      out_.num_tokens -= it->end - it->start;
      out_.seqs.erase(it);
      break;
    }
  }
  kv_.seq_free(victim->id);
  victim->num_computed_tokens = 0;
  victim->num_cached_tokens = 0;
  victim->state = RequestState::Waiting;
  ++victim->num_preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  // Its original arrival puts it ahead of its tenant's later requests of the same level.
  waiting_.push(victim);
  out_.preempted.push_back(victim->id);
  preempted_this_step_ = true;
  ++counters_.num_preemptions;
}

FinishReason Scheduler::length_limit(const Request& r) const {
  if (r.options.max_new_tokens > 0 && r.num_generated() >= r.options.max_new_tokens) return FinishReason::Length;
  if (r.num_tokens() >= config_.max_model_len) return FinishReason::Length;
  return FinishReason::None;
}

Status Scheduler::update(std::span<const SeqOutput> outputs) {
  if (!awaiting_update_) {
    if (outputs.empty()) return {};
    return Error{"update: no step is waiting for outputs"};
  }
  // Validate everything before changing anything.
  output_of_.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!output_of_.emplace(outputs[i].id, int32_t(i)).second) {
      return Error{"update: two outputs for request " + str(outputs[i].id)};
    }
  }
  size_t num_matched = 0;
  for (const ScheduledSeq& s : out_.seqs) {
    auto it = output_of_.find(s.id);
    const bool active = requests_.count(s.id) != 0;
    const bool prefill_only = active && requests_.at(s.id)->options.prefill_only;
    if (it != output_of_.end()) {
      if (!s.want_logits || prefill_only)
        return Error{"update: request " + str(s.id) + " samples no token this step"};
      const auto& acc = outputs[size_t(it->second)].accepted;
      const auto draft = s.tokens.subspan(s.tokens.size() - size_t(s.num_draft));
      if (acc.size() > draft.size() || !std::equal(acc.begin(), acc.end(), draft.begin()))
        return Error{"update: request " + str(s.id) + " accepted tokens that are not a prefix of its draft"};
      ++num_matched;
    } else if (s.want_logits && active && !prefill_only) {
      return Error{"update: no sampled token for request " + str(s.id)};
    }
  }
  if (num_matched != outputs.size()) {
    for (const SeqOutput& o : outputs) {
      bool found = false;
      for (const ScheduledSeq& s : out_.seqs) found |= s.id == o.id;
      if (!found) return Error{"update: request " + str(o.id) + " was not scheduled in the last step"};
    }
  }

  awaiting_update_ = false;
  const int64_t t = now();
  for (const ScheduledSeq& s : out_.seqs) {
    auto req = requests_.find(s.id);
    if (req == requests_.end()) continue;  // finished or aborted since step()
    Request* r = req->second.get();
    auto it = output_of_.find(s.id);
    if (s.num_draft > 0) {
      // Verified: the last token and the accepted drafts have their KV; the rest is rolled back.
      const std::vector<int32_t> none;
      const std::vector<int32_t>& acc = it != output_of_.end() ? outputs[size_t(it->second)].accepted : none;
      r->tokens.insert(r->tokens.end(), acc.begin(), acc.end());
      r->num_computed_tokens = s.start + 1 + int32_t(acc.size());
      kv_.seq_truncate(r->id, r->num_computed_tokens);
      counters_.num_accepted_tokens += int64_t(acc.size());
      for (size_t j = 0; j < acc.size() && j < counters_.accepted_tokens_at.size(); ++j) ++counters_.accepted_tokens_at[j];
      for (size_t i = 0; i < acc.size(); ++i) r->timings.token_ns.push_back(t);
      if (!acc.empty() && r->timings.first_token_ns < 0) r->timings.first_token_ns = t;
    }
    // The chunk's KV is written now: full blocks of verified tokens become shareable.
    kv_.seq_commit(r->id, r->tokens, r->num_computed_tokens);
    if (r->options.prefill_only && s.want_logits) {  // the prompt is computed: done
      finish_request(r, FinishReason::Length);
      continue;
    }
    if (it == output_of_.end()) continue;
    const SeqOutput& o = outputs[size_t(it->second)];
    r->tokens.push_back(o.token);
    if (r->timings.first_token_ns < 0) r->timings.first_token_ns = t;
    r->timings.token_ns.push_back(t);
    FinishReason reason = o.finish != FinishReason::None ? o.finish : length_limit(*r);
    if (reason != FinishReason::None) finish_request(r, reason);
  }
  return {};
}

Status Scheduler::finish(RequestId id, FinishReason reason) {
  if (reason == FinishReason::None) return Error{"finish: request " + str(id) + " needs a reason"};
  auto it = requests_.find(id);
  if (it == requests_.end()) return Error{"finish: unknown request " + str(id)};
  finish_request(it->second.get(), reason);
  return {};
}

void Scheduler::finish_request(Request* r, FinishReason reason) {
  if (r->state == RequestState::Waiting) {
    waiting_.erase(r);
  } else if (r->state == RequestState::Running) {
    kv_.seq_free(r->id);
    running_.erase(std::find(running_.begin(), running_.end(), r));
    // Seats free up at this rate while busy (the TTFT forecast's); an idle gap is not one.
    const int64_t t = now();
    constexpr double kKeep = 0.9;
    if (last_finish_ns_ >= 0) {
      const double gap = double(t - last_finish_ns_);
      finish_interval_ns_ = finish_interval_ns_ > 0 ? kKeep * finish_interval_ns_ + (1 - kKeep) * gap : gap;
    }
    last_finish_ns_ = running_.empty() ? -1 : t;
  }
  r->state = RequestState::Finished;
  r->finish_reason = reason;
  r->timings.finished_ns = now();
  ++counters_.num_finished;
  auto node = requests_.extract(r->id);
  finished_.push_back(std::move(*node.mapped()));
}

std::vector<Request> Scheduler::take_finished() {
  std::vector<Request> out;
  out.swap(finished_);
  return out;
}

QueueLoad Scheduler::load() const {
  QueueLoad l;
  // One entry per (class, priority, tenant): an index keeps this linear in the requests.
  std::map<std::tuple<ServiceClass, int32_t, std::string_view>, size_t> index;
  auto add = [&](const Request& r, int64_t tokens, int32_t requests, int32_t seats) {
    auto [it, fresh] = index.try_emplace({r.options.service_class, r.options.priority, r.options.tenant}, l.backlog.size());
    if (fresh) l.backlog.push_back({r.options.service_class, r.options.priority, r.options.tenant, r.options.tenant_weight});
    Backlog& b = l.backlog[it->second];
    b.tokens += tokens;
    b.requests += requests;
    b.seats += seats;
  };
  waiting_.for_each([&](const Request& r) { add(r, r.num_tokens(), 1, 0); });
  for (const Request* r : running_) {
    const int32_t left = r->num_tokens() - r->num_computed_tokens;  // 1: decoding, no prompt left
    add(*r, left > 1 ? left : 0, 0, 1);
  }
  l.num_running = int32_t(running_.size());
  l.seats = seats();
  l.step_tokens = config_.max_batch_tokens;
  l.decode_step_ns = running_.empty() ? 0 : cost_.decode_time(l.num_running);
  l.prefill_token_ns = cost_.prefill_token_ns();
  l.finish_interval_ns = finish_interval_ns_;
  for (const Request* r : running_) {
    const int32_t left = final_length(*r) - r->num_tokens();
    if (left > 0 && (l.min_remaining_tokens == 0 || left < l.min_remaining_tokens)) l.min_remaining_tokens = left;
  }
  return l;
}

const Request* Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace kvasir::sched
