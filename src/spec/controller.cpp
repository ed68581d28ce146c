#include "spec/controller.h"

#include <algorithm>
#include <cmath>

namespace kvasir::spec {

namespace {

double rate(const DraftCandidate& c, int32_t j) {
  if (c.accept.empty()) return 0;
  return std::clamp(c.accept[std::min(size_t(j), c.accept.size() - 1)], 0.0, 0.999);
}

// The candidate's catch-up, spread over the steps it is expected to keep drafting for: its tokens
// left over the tokens a step yields while every position drafts.
double catch_up_cost(const DraftCandidate& c, const DraftCosts& costs) {
  if (c.catch_up == 0) return 0;
  double per_step = 1, g = 1;
  for (int32_t j = 0; j < c.most; ++j) per_step += (g *= rate(c, j));
  return costs.catch_up_token * c.catch_up / std::clamp(double(c.left) / per_step, 1.0, 64.0);
}

// The step's verify rows [0, total) together, and what row `total` adds (never negative: averages
// of noisy steps need not grow).
double verify_total(const DraftCosts& c, int32_t total) {
  const int32_t last = int32_t(c.verify_rows.size()) - 1;
  if (last < 1) return total * c.verify_row;
  if (total <= last) return c.verify_rows[size_t(total)];
  return c.verify_rows[size_t(last)] + (total - last) * c.verify_row;
}
double verify_added(const DraftCosts& c, int32_t total) {
  return std::max(0.0, verify_total(c, total + 1) - verify_total(c, total));
}

}  // namespace

StepForecast plan_draft_rows(std::span<DraftCandidate> cands, int32_t decodes, const DraftCosts& costs) {
  double tokens = double(std::max(decodes, 1)), time = 1.0;
  const double plain_rate = tokens;
  std::vector<double> gain(cands.size(), 1.0);  // chance that every row so far is accepted
  std::vector<size_t> active;
  for (size_t i = 0; i < cands.size(); ++i) {
    cands[i].k = 0;
    if (cands[i].most > 0) active.push_back(i);
  }
  struct Row {
    double gain, cost;
    size_t cand;
  };
  std::vector<Row> rows;
  int32_t verify_count = 0;  // verify rows chosen at the depths before
  for (int32_t j = 0; !active.empty(); ++j) {
    rows.clear();
    for (size_t i : active) {
      const DraftCandidate& c = cands[i];
      if (c.most <= j) continue;
      double cost = costs.draft_row;  // the verify row's share is added where the prefix places it
      if (j == 0) cost += catch_up_cost(c, costs);
      rows.push_back({gain[i] * rate(c, j), cost, i});
    }
    // Ordered by gain per cost at the average verify row's price.
    std::sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
      const double ca = std::max(a.cost + costs.verify_row, 1e-9), cb = std::max(b.cost + costs.verify_row, 1e-9);
      return a.gain * cb > b.gain * ca || (a.gain * cb == b.gain * ca && a.cand < b.cand);
    });
    // The prefix with the best step rate, the depth's forward included.
    double best = tokens / time, g = 0, k = 0, best_g = 0, best_k = 0;
    size_t best_m = 0;
    for (size_t m = 0; m < rows.size(); ++m) {
      g += rows[m].gain;
      k += rows[m].cost + verify_added(costs, verify_count + int32_t(m));
      const double r = (tokens + g) / (time + costs.draft_forward + k);
      if (r > best) best = r, best_m = m + 1, best_g = g, best_k = k;
    }
    const double extra_time = costs.draft_forward + best_k;
    if (best_m == 0 || best_g * time <= kRowMargin * tokens * extra_time) break;
    // Corrected by what drafting has realized, the step must still beat a plain one.
    if (costs.realized * (tokens + best_g) / (time + extra_time) <= kRowMargin * plain_rate) break;
    tokens += best_g;
    time += extra_time;
    verify_count += int32_t(best_m);
    active.clear();
    for (size_t m = 0; m < best_m; ++m) {
      cands[rows[m].cand].k = j + 1;
      gain[rows[m].cand] = rows[m].gain;
      active.push_back(rows[m].cand);
    }
  }
  // Probes: sure rows, cheapest first (the least to catch up), the prefix with the best rate; a
  // draft forward is theirs to pay unless the step drafts anyway.
  const bool forward_planned = std::any_of(cands.begin(), cands.end(), [](const DraftCandidate& c) { return c.k > 0; });
  std::vector<std::pair<double, size_t>> due;
  for (size_t i = 0; i < cands.size(); ++i)
    if (cands[i].probe_due && cands[i].k == 0 && cands[i].most > 0)
      due.push_back({costs.draft_row + catch_up_cost(cands[i], costs), i});
  std::sort(due.begin(), due.end());
  double best = tokens / time, extra = forward_planned ? 0.0 : costs.draft_forward, best_extra = 0;
  size_t best_m = 0;
  for (size_t m = 0; m < due.size(); ++m) {
    extra += due[m].first + verify_added(costs, verify_count + int32_t(m));
    const double r = (tokens + double(m + 1)) / (time + extra);
    if (r > best) best = r, best_m = m + 1, best_extra = extra;
  }
  if (best_m == 0 || best <= kRowMargin * tokens / time || costs.realized * best <= kRowMargin * plain_rate)
    return {tokens, time};
  time += best_extra;
  for (size_t m = 0; m < best_m; ++m) {
    cands[due[m].second].k = 1;
    tokens += rate(cands[due[m].second], 0);
  }
  return {tokens, time};
}

void RealizedGain::observe(double forecast_gain, double realized_gain) {
  constexpr double kKeep = 0.9;  // about the last ten drafted steps
  if (!(forecast_gain > 0) || !(realized_gain > 0)) return;
  w_ = kKeep * w_ + 1;
  forecast_ = kKeep * forecast_ + forecast_gain;
  realized_ = kKeep * realized_ + realized_gain;
}

void RealizedGain::relax() {
  constexpr double kFade = 0.98;  // ~35 plain steps halve the evidence
  w_ *= kFade;
  forecast_ *= kFade;
  realized_ *= kFade;
}

double RealizedGain::factor() const {
  if (w_ < 2.5) return 1.0;  // fewer than three recent steps say nothing against single steps' noise
  return std::clamp(realized_ / forecast_, 0.5, 1.25);
}

void AcceptanceRecord::observe(size_t position, bool accepted) {
  if (tries_.size() <= position) tries_.resize(position + 1, 0.0), hits_.resize(position + 1, 0.0);
  tries_[position] = keep_ * tries_[position] + 1;
  hits_[position] = keep_ * hits_[position] + (accepted ? 1 : 0);
}

void AcceptanceRecord::fade(size_t position, double keep) {
  if (position >= tries_.size()) return;
  tries_[position] *= keep;
  hits_[position] *= keep;
}

double AcceptanceRecord::rate(size_t position, double prior, double prior_weight) const {
  // Each position is shrunk toward the one before's rate, but no lower than the prior: a draft
  // trained over several positions keeps its rate with depth, and a deeper position is learnt only
  // once it is tried (a position never tried starts from max(the one before's rate, prior)).
  double r = prior;
  for (size_t j = 0; j <= position; ++j) {
    const double toward = j == 0 ? prior : std::max(r, prior);
    r = j < tries_.size() ? (hits_[j] + prior_weight * toward) / (tries_[j] + prior_weight) : toward;
  }
  return r;
}

void AcceptanceRecord::estimate(const AcceptanceRecord& own, const AcceptanceRecord& pooled, size_t positions,
                                double prior, double pooled_weight, double weight, std::vector<double>& out) {
  out.resize(positions);
  for (size_t j = 0; j < positions; ++j) {
    const double base = pooled.rate(j, prior, pooled_weight);
    const double h = j < own.hits_.size() ? own.hits_[j] : 0.0, t = j < own.tries_.size() ? own.tries_[j] : 0.0;
    out[j] = (h + weight * base) / (t + weight);
  }
}

int ConfidenceCalibration::bin(double confidence) {
  if (!(confidence > 0)) return 0;  // NaN too
  return std::min(int(std::min(confidence, 1.0) * kBins), kBins - 1);
}

void ConfidenceCalibration::observe(size_t position, double confidence, bool accepted) {
  const size_t g = std::min<size_t>(position, kGroups - 1);
  const int b = bin(confidence);
  tries_[g][b] = kKeep * tries_[g][b] + 1;
  hits_[g][b] = kKeep * hits_[g][b] + (accepted ? 1 : 0);
}

double ConfidenceCalibration::acceptance(size_t position, double confidence) const {
  const size_t g = std::min<size_t>(position, kGroups - 1);
  const int b = bin(confidence);
  const double c = std::clamp(std::isnan(confidence) ? 0.0 : confidence, kFloor, 1.0);
  return (hits_[g][b] + kPriorWeight * c) / (tries_[g][b] + kPriorWeight);
}

void DraftCostModel::observe_forward(int32_t rows, double ns) {
  constexpr double kKeep = 0.9;  // recent forwards weigh most (the machine's load changes)
  const double x = rows, y = std::max(ns, 0.0);
  w_ = kKeep * w_ + 1;
  sx_ = kKeep * sx_ + x;
  sxx_ = kKeep * sxx_ + x * x;
  sy_ = kKeep * sy_ + y;
  sxy_ = kKeep * sxy_ + x * y;
  const double var = w_ * sxx_ - sx_ * sx_;
  row_ns_ = 0;
  fixed_ns_ = sy_ / w_;
  if (var > 1e-6 * w_ * w_) {  // row counts varied: fit the slope
    row_ns_ = std::max(0.0, (w_ * sxy_ - sx_ * sy_) / var);
    fixed_ns_ = (sy_ - row_ns_ * sx_) / w_;
    if (fixed_ns_ < 0) fixed_ns_ = 0, row_ns_ = sy_ / sx_;
  }
}

void DraftCostModel::observe_first(int32_t logits_rows, int32_t catch_up_tokens, double ns) {
  // With little to catch up it is a plain forward (all there is to time when K is 1).
  if (catch_up_tokens < std::max(logits_rows, 4)) return observe_forward(logits_rows + catch_up_tokens, ns);
  const double plain = measured() ? forward_ns(logits_rows) : 0.0;
  const double per = std::max(0.0, ns - plain) / catch_up_tokens;
  catch_up_ns_ = catch_up_ns_ < 0 ? per : 0.8 * catch_up_ns_ + 0.2 * per;
}

DraftCosts relative_costs(double step_ns, double verify_row_ns, const DraftCostModel* draft, double prefill_token_ns,
                          std::span<const double> verify_rows_ns) {
  DraftCosts c;
  if (verify_row_ns > 0) c.verify_row = verify_row_ns / step_ns;
  // The measured counts, up to the first one not measured.
  for (size_t d = 0; d < verify_rows_ns.size() && (d == 0 || verify_rows_ns[d] > 0); ++d)
    c.verify_rows.push_back(d == 0 ? 0.0 : verify_rows_ns[d] / step_ns);
  if (!draft) return c;
  c.draft_forward = 0.05;
  if (draft->measured()) {
    c.draft_forward = draft->forward_fixed_ns() / step_ns;
    c.draft_row = draft->per_row_ns() / step_ns;
  }
  c.catch_up_token = (draft->catch_up_token_ns() >= 0 ? draft->catch_up_token_ns() : prefill_token_ns) / step_ns;
  return c;
}

}  // namespace kvasir::spec
