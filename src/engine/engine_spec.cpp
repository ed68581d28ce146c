// EngineCore's speculation: which requests draft how many rows (the controller, checked against
// what drafted steps realize), and the proposer's drafts filled once the step has placed its rows.
#include <algorithm>

#include "engine/engine_core_impl.h"

namespace kvasir::engine {

// Drafts for the requests that decode next step (n-gram: what followed the latest earlier
// occurrence of their last tokens), as many rows each as spec::plan_draft_rows finds paying for
// the whole step, from each request's acceptance per draft position and the measured costs: a
// verify row (the scheduler's step-cost model), and for a model drafter its forwards and its
// catch-up on context it has not seen (spec::DraftCostModel), the forecast corrected by what
// drafted steps realized (spec::RealizedGain). A request without rows for a while is probed with
// one (with the others due, when their rows as sure tokens would pay for their shared draft
// forward), so that its estimate can recover; every 8th step drafts for nobody (every 32nd after
// the first 64: 3% of the steps), which keeps the plain step's cost measured at a small price
// where drafts pay. A proposer that scores its drafts (the trained head) drafts for every
// candidate first, where one sure draft per request would pay, and each row is priced by its
// draft's calibrated probability, without the realized-gain correction (its plain steps: every
// 64th).
void EngineCore::Impl::propose_drafts() {
  const SpecOptions& o = options.spec;
  if (!proposer) return;
  const int64_t now_ns = clock();
  const bool scored = proposer->scores_drafts();
  if (o.adaptive && !scored) judge_last_step(now_ns);  // a scoring proposer's plans skip that check
  spec_last = {.start_ns = now_ns};
  ++spec_steps;
  // A scoring proposer's rows are chosen by this step's probabilities, so its plain steps only
  // keep the cost scale fresh: every 64th (every 8th, then 32nd, cost it 2.5% at batch 1).
  const int64_t plain_every = scored ? 64 : spec_steps <= 64 ? 8 : 32;
  const bool plain_step = o.adaptive && spec_steps % plain_every == 0;
  if (plain_step && !scored) return;
  std::vector<SpecCandidate> cands;
  int32_t decodes = 0;
  for (auto& [id, l] : live) {
    const sched::Request* r = scheduler.find(id);
    if (!r || r->state != sched::RequestState::Running || r->num_tokens() - r->num_computed_tokens != 1) continue;
    ++decodes;
    if (!l->params.speculative || l->params.stop.max_tokens == 0) continue;
    const int32_t left = l->params.stop.max_tokens - r->num_generated() - 1;  // beyond the step's own token
    if (left <= 0) continue;
    // A model drafts after the controller chose K (its drafts cost time): placeholders until then.
    // A scoring proposer drafts for all candidates at once below (score_candidates).
    std::vector<int32_t> draft = scored ? std::vector<int32_t>(size_t(o.max_k), 0) : proposer->propose(id, r->tokens, o.max_k);
    const int32_t most = std::min(int32_t(draft.size()), left);
    if (most > 0) cands.push_back({id, l.get(), std::move(draft), 0, most, left});
  }
  if (plain_step) {
    // The head still runs, its drafts unused, so that the plain step is measured as the steps it
    // is compared with run (the head's forward just before the target's): without it the
    // step-cost model charged 0.13-0.23 of a plain step to a verify row, with it 0.00-0.10,
    // where the forward alone takes ~0.08 more a row; drafts were declined that paid.
    score_candidates(cands);
    return;
  }
  if (!o.adaptive) {
    if (scored) score_candidates(cands);
    for (auto& c : cands) c.k = c.most;
  } else {
    // Costs are relative to a plain decode step: nothing is drafted until one was measured.
    const sched::StepCostModel& step_cost = scheduler.step_cost();
    const int32_t n = std::max(decodes, 1);
    const double step = step_cost.plain_time(n);
    if (step <= 0) return;
    int32_t most_rows = 0;
    for (const SpecCandidate& c : cands) most_rows += c.most;
    std::vector<double> verify_rows_ns(size_t(std::min(most_rows, 256)) + 1);
    for (size_t d = 0; d < verify_rows_ns.size(); ++d)
      verify_rows_ns[d] = step_cost.draft_rows_time(n, int32_t(d));
    const spec::DraftCostModel* draft_cost = proposer->cost();
    spec::DraftCosts costs = spec::relative_costs(step, step_cost.draft_row_ns(), draft_cost,
                                                  step_cost.prefill_token_ns(), verify_rows_ns);
    // A scoring proposer's rows are priced by this step's probabilities, calibrated against what
    // verification kept: its forecast is corrected draft by draft, and scaling the whole step's
    // rate by the recent steps' realized share as well vetoed drafts that pay where the gain is
    // small (a text the head knows poorly: 58 of 123 plans declined, 1.27 tokens a step against
    // 1.40 drafting every offered row, which was 5% faster).
    costs.realized = scored ? 1.0 : realized_gain.factor();
    double scored_time = 0;  // a scoring proposer's forwards, in plain steps, spent before the plan
    if (scored) {
      // Its forwards are spent before the plan, so they run only where drafts could pay at all:
      // where one sure draft per request pays for its row and the forward.
      std::vector<spec::DraftCandidate> sure(cands.size());
      const double certain[] = {1.0};
      for (auto& c : sure) c = {.accept = certain, .most = 1};
      spec::plan_draft_rows(sure, decodes, costs);
      if (std::none_of(sure.begin(), sure.end(), [](const spec::DraftCandidate& c) { return c.k > 0; })) return;
      scored_time = double(score_candidates(cands)) / step;
      costs.draft_forward = costs.draft_row = costs.catch_up_token = 0;  // spent: the plan prices rows only
    }
    std::vector<spec::DraftCandidate> plan(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) {
      SpecCandidate& c = cands[i];
      if (scored) {
        c.live->spec_accept.resize(c.live->spec_conf.size());
        for (size_t j = 0; j < c.live->spec_conf.size(); ++j)
          c.live->spec_accept[j] = calibration_for(*c.live).acceptance(j, c.live->spec_conf[j]);
      } else {
        spec::AcceptanceRecord::estimate(c.live->spec_own, spec_pooled, size_t(std::max(o.max_k, 1)),
                                         Live::kAcceptPrior, Live::kPriorWeight, Live::kPooledWeight, c.live->spec_accept);
      }
      plan[i] = {.accept = c.live->spec_accept,
                 .most = c.most,
                 .catch_up = proposer->catch_up(c.id, scheduler.find(c.id)->tokens),
                 .left = c.left,
                 .probe_due = !scored && c.live->spec_idle_steps >= c.live->spec_probe_wait};
    }
    const spec::StepForecast forecast = spec::plan_draft_rows(plan, decodes, costs);
    spec_last.forecast_gain = forecast.tokens / (forecast.time + scored_time) / double(std::max(decodes, 1));
    if (draft_cost && !draft_cost->measured()) {
      // Until the draft's forwards are measured (its priors say nothing about this draft), one
      // request tries it whatever the plan: the one with the least to catch up, with two
      // positions so that a plain draft forward is timed too.
      size_t best = 0;
      for (size_t i = 1; i < plan.size(); ++i)
        if (plan[i].catch_up < plan[best].catch_up) best = i;
      for (size_t i = 0; i < plan.size(); ++i) plan[i].k = i == best ? std::min(plan[i].most, 2) : 0;
      spec_last.forecast_gain = 0;  // not the plan's: nothing to judge it by
    }
    for (size_t i = 0; i < cands.size(); ++i) {
      SpecCandidate& c = cands[i];
      c.k = plan[i].k;
      Live& l = *c.live;
      if (c.k == 0) {
        ++l.spec_idle_steps;
      } else {
        l.spec_probe_wait = plan[i].probe_due ? std::min(2 * l.spec_probe_wait, 256) : Live::kFirstProbeWait;
        l.spec_idle_steps = 0;
      }
    }
  }
  for (auto& c : cands) {
    c.k = std::min(c.k, int32_t(c.draft.size()));
    if (c.k == 0) continue;
    c.draft.resize(size_t(c.k));
    (void)scheduler.set_draft(c.id, c.draft);
  }
}

// A scoring proposer's drafts for every candidate, in one call: each candidate's draft, its rows
// at most (the drafts offered) and the proposer's probabilities (Live::spec_conf). Returns the
// time it took, which the step-cost model leaves out (it prices target forwards only).
int64_t EngineCore::Impl::score_candidates(std::vector<SpecCandidate>& cands) {
  draft_jobs.clear();
  for (const SpecCandidate& c : cands) draft_jobs.push_back({.id = c.id, .context = scheduler.find(c.id)->tokens, .k = c.most});
  const int64_t t0 = clock();
  const Status s = proposer->fill(draft_jobs);
  const int64_t ns = clock() - t0;
  scheduler.exclude_time(ns);
  for (size_t i = 0; i < cands.size(); ++i) {
    SpecCandidate& c = cands[i];
    spec::DraftJob& j = draft_jobs[i];
    if (!s || j.confidence.size() != j.draft.size()) j.draft.clear();  // no drafts this step
    c.draft = std::move(j.draft);
    c.most = std::min(c.most, int32_t(c.draft.size()));
    c.live->spec_conf.assign(j.confidence.begin(), j.confidence.begin() + c.most);
  }
  return ns;
}

// What the step just run was, for judge_last_step: its decodes, whether it drafted, whether it
// held anything but decodes, and the tokens it emitted.
void EngineCore::Impl::note_spec_step(const sched::SchedulerOutput& so) {
  spec_last.decodes_only = true;
  for (const auto& seq : so.seqs) {
    const bool decode = seq.want_logits && seq.end - seq.start == 1 + seq.num_draft;
    spec_last.decodes_only = spec_last.decodes_only && decode;
    spec_last.decodes += decode;
    spec_last.drafted = spec_last.drafted || seq.num_draft > 0;
  }
  for (const auto& o : outputs) spec_last.tokens += 1 + int32_t(o.accepted.size());
}

// The last step against its forecast: a drafted step of decodes only (a prefill chunk's time would
// blur it) reports the gain it forecast and the one it realized, its tokens per time over the
// plain step's measured rate; a step without drafts fades that evidence.
void EngineCore::Impl::judge_last_step(int64_t now_ns) {
  const SpecStep& l = spec_last;
  if (l.start_ns < 0 || now_ns <= l.start_ns) return;
  if (!l.drafted) return realized_gain.relax();
  const double plain = scheduler.step_cost().plain_time(l.decodes);
  if (!l.decodes_only || l.forecast_gain <= 0 || plain <= 0) return;
  const double realized = double(l.tokens) / double(now_ns - l.start_ns) / (double(l.decodes) / plain);
  realized_gain.observe(l.forecast_gain, realized);
}

// Runs the draft model, batched, for the sequences this step scheduled with draft rows, puts its
// tokens in those rows (the rows it could not fill leave the step), and feeds what its forwards
// took to the draft's cost model. It drafts after scheduling because a self-speculative draft
// writes its K/V where the step's verify rows go, in the blocks the scheduler just placed.
void EngineCore::Impl::draft_scheduled(const sched::SchedulerOutput& so) {
  draft_jobs.clear();
  for (const sched::ScheduledSeq& seq : so.seqs)
    if (seq.num_draft > 0)
      draft_jobs.push_back(
          {.id = seq.id, .context = scheduler.find(seq.id)->tokens, .k = seq.num_draft, .target_blocks = seq.block_table});
  if (draft_jobs.empty()) return;
  const Status s = proposer->fill(draft_jobs);
  scheduler.exclude_time(proposer->last_fill_ns());  // the step-cost model prices target forwards only
  for (spec::DraftJob& j : draft_jobs) {
    if (!s) j.draft.clear();  // no drafts this step; the proposer has forgotten these requests
    (void)scheduler.fill_draft(j.id, j.draft);
  }
}

// A proposer that drafts from hidden states gets, per request that sampled this step, the hidden
// state of the row that chose its latest token: row j of its verify rows when j drafts were kept
// (row 0 without drafts), with the request's length after the step.
void EngineCore::Impl::hand_hidden_to_proposer(const sched::SchedulerOutput& so) {
  const float* hidden = runner->hidden();
  if (!hidden) return;
  const int64_t n_embd = runner->info().n_embd;
  std::unordered_map<RequestId, size_t> kept;
  for (const sched::SeqOutput& o : outputs) kept[o.id] = o.accepted.size();
  for (size_t s = 0; s < so.seqs.size(); ++s) {
    const RowPlan& plan = plans[s];
    const sched::Request* r = scheduler.find(so.seqs[s].id);
    auto it = kept.find(so.seqs[s].id);
    if (plan.draft_hidden < 0 || !r || it == kept.end() || r->state != sched::RequestState::Running) continue;
    const int64_t row = plan.draft_hidden + int64_t(std::min<size_t>(it->second, size_t(so.seqs[s].num_draft)));
    proposer->observe_hidden(so.seqs[s].id, std::span<const float>(hidden + row * n_embd, size_t(n_embd)), r->tokens.size());
  }
}

}  // namespace kvasir::engine
