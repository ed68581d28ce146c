#include "sched/step_cost.h"

#include <algorithm>

namespace kvasir::sched {
namespace {

constexpr double kKeep = 0.8;       // plain and prefill averages: follow depth changes in ~5 steps
constexpr double kLineKeep = 0.98;  // the rows line: about the last 50 steps at that count
constexpr double kDepartureKeep = 0.99, kDeparturePrior = 8;  // a count's departure: ~100 of its steps
constexpr double kRecentKeep = 0.9;  // the recent steps' common departure: ~10 steps

}  // namespace

void StepCostModel::RowsLine::observe(double rows, double ns) {
  if (fitted()) ns = std::clamp(ns, 0.5 * at(rows), 2.0 * at(rows));
  w = kLineKeep * w + 1;
  sx = kLineKeep * sx + rows;
  sxx = kLineKeep * sxx + rows * rows;
  sy = kLineKeep * sy + ns;
  sxy = kLineKeep * sxy + rows * ns;
}

bool StepCostModel::RowsLine::fitted() const { return w >= 4 && w * sxx - sx * sx > 0.05 * w * w; }

double StepCostModel::RowsLine::slope() const {
  return std::max(0.0, (w * sxy - sx * sy) / (w * sxx - sx * sx));  // rows never make a step faster
}

double StepCostModel::RowsLine::intercept() const { return std::max(0.0, (sy - slope() * sx) / w); }

void StepCostModel::Departure::observe(double r) {
  ratio = kDepartureKeep * ratio + std::clamp(r, 0.5, 2.0);
  w = kDepartureKeep * w + 1;
}

double StepCostModel::Departure::value() const { return (ratio + kDeparturePrior) / (w + kDeparturePrior); }

void StepCostModel::RowsFit::observe(int32_t rows, double ns) {
  if (line.fitted()) {
    // Measured against the recent steps' common departure: while the machine slows, the line lags
    // and every count seems dearer for a while; only what sets a count apart from the rest stays.
    const double ratio = std::clamp(ns / std::max(line.at(rows), 1.0), 0.5, 2.0);
    recent_w = kRecentKeep * recent_w + 1;
    recent_ratio = kRecentKeep * recent_ratio + ratio / departure(rows);
    if (int32_t(departures.size()) <= rows) departures.resize(size_t(rows) + 1);
    departures[size_t(rows)].observe(ratio / (recent_ratio / recent_w));
  }
  line.observe(rows, ns);
}

double StepCostModel::RowsFit::departure(int32_t rows) const {
  return rows < int32_t(departures.size()) ? departures[size_t(rows)].value() : 1.0;
}

const StepCostModel::RowsFit* StepCostModel::fit(int32_t n) const {
  return n >= 0 && n < int32_t(fits_.size()) && fits_[size_t(n)].line.fitted() ? &fits_[size_t(n)] : nullptr;
}

double StepCostModel::decode_time(int32_t n) const {
  if (n < int32_t(decode_ns_.size()) && decode_ns_[size_t(n)] > 0) return decode_ns_[size_t(n)];
  for (int32_t m = std::min<int32_t>(n, int32_t(decode_ns_.size())) - 1; m > 0; --m)
    if (decode_ns_[size_t(m)] > 0) return decode_ns_[size_t(m)] * n / m;
  for (size_t m = size_t(std::max(n, 0)); m < decode_ns_.size(); ++m)
    if (decode_ns_[m] > 0) return decode_ns_[m];
  return -1;
}

double StepCostModel::plain_time(int32_t n) const {
  const double measured = decode_time(n);
  const RowsFit* f = fit(n);
  if (!f || measured <= 0) return measured;
  // A line far from every plain step measured is an extrapolation gone wrong, not the machine.
  return std::clamp(f->at(0), 0.5 * measured, 2.0 * measured);
}

double StepCostModel::draft_rows_time(int32_t n, int32_t rows) const {
  if (rows <= 0) return 0;
  const RowsFit* f = fit(n);
  if (!f) return rows * draft_row_ns_;
  return std::max(0.0, f->at(rows) - plain_time(n));
}

void StepCostModel::observe(int64_t duration_ns, int32_t num_decodes, int32_t num_prefill_tokens,
                            int32_t num_draft_rows) {
  const double d = double(std::max<int64_t>(duration_ns, 0));
  if (num_prefill_tokens == 0 && num_decodes > 0) {
    if (int32_t(fits_.size()) <= num_decodes) fits_.resize(size_t(num_decodes) + 1);
    fits_[size_t(num_decodes)].observe(num_draft_rows, d);
  }
  if (num_prefill_tokens == 0 && num_draft_rows == 0) {
    if (num_decodes <= 0) return;
    if (int32_t(decode_ns_.size()) <= num_decodes) decode_ns_.resize(size_t(num_decodes) + 1, 0.0);
    double& avg = decode_ns_[size_t(num_decodes)];
    avg = avg > 0 ? kKeep * avg + (1 - kKeep) * d : d;
    return;
  }
  const double base = num_decodes > 0 ? plain_time(num_decodes) : 0.0;
  if (base < 0) return;
  // Draft rows want logits (the output head for each) and come in small numbers: a cost of their
  // own, measured on steps without prefill.
  if (num_prefill_tokens == 0) {
    draft_excess_ns_ = kKeep * draft_excess_ns_ + std::max(0.0, d - base);
    draft_excess_rows_ = kKeep * draft_excess_rows_ + num_draft_rows;
    draft_row_ns_ = draft_excess_ns_ / draft_excess_rows_;
    return;
  }
  // The time beyond the decodes, averaged per token with each step weighted by its tokens: a
  // step with a 1-token chunk says little about the cost per token and must not swing it.
  excess_ns_ = kKeep * excess_ns_ + std::max(0.0, d - base - num_draft_rows * draft_row_ns_);
  excess_tokens_ = kKeep * excess_tokens_ + num_prefill_tokens;
  prefill_token_ns_ = excess_ns_ / excess_tokens_;
}

}  // namespace kvasir::sched
