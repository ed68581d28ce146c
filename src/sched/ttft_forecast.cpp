#include "sched/ttft_forecast.h"

#include <algorithm>
#include <cmath>

namespace kvasir::sched {
namespace {

// -1: a goes before b; 0: same level; 1: after.
int compare_level(ServiceClass ca, int32_t pa, ServiceClass cb, int32_t pb) {
  if (ca != cb) return ca < cb ? -1 : 1;
  if (pa != pb) return pa < pb ? -1 : 1;
  return 0;
}

}  // namespace

void add_arrival(QueueLoad& load, const Arrival& a) {
  for (Backlog& b : load.backlog) {
    if (b.service_class == a.service_class && b.priority == a.priority && b.tenant == a.tenant) {
      b.tokens += a.tokens;
      b.requests += 1;
      return;
    }
  }
  load.backlog.push_back({a.service_class, a.priority, a.tenant, a.weight, a.tokens, 1});
}

int64_t forecast_ttft_ns(const QueueLoad& load, const Arrival& a) {
  const bool decodes_measured = load.num_running == 0 || load.decode_step_ns >= 0;
  if (!decodes_measured || load.prefill_token_ns <= 0) return -1;
  // The newcomer's own tenant at its level: its earlier work goes first (FCFS within a tenant).
  double own_tokens = double(a.tokens), own_requests = 1, own_seats = 0;
  // The level's seats and the weights of the tenants holding them (Scheduler::fair_share_victim).
  double level_seats = 0, seat_weight = a.weight;
  for (const Backlog& b : load.backlog) {
    if (compare_level(b.service_class, b.priority, a.service_class, a.priority) != 0) continue;
    level_seats += b.seats;
    if (b.tenant == a.tenant) {
      own_tokens += double(b.tokens);
      own_requests += b.requests;
      own_seats += b.seats;
    } else if (b.seats > 0) {
      seat_weight += b.weight;
    }
  }
  const bool under_seat_share =
      own_seats < level_seats && own_seats + own_requests <= level_seats * a.weight / seat_weight;
  double ahead_tokens = 0, ahead_requests = 0;
  for (const Backlog& b : load.backlog) {
    const int order = compare_level(b.service_class, b.priority, a.service_class, a.priority);
    if (order > 0 || (order == 0 && b.tenant == a.tenant)) continue;
    double share = 1;  // the fraction of b that goes first
    if (order == 0 && b.tokens > 0)
      share = std::min(1.0, own_tokens * b.weight / std::max(a.weight, 1e-6) / double(b.tokens));
    ahead_tokens += share * double(b.tokens);
    ahead_requests += std::ceil(share * b.requests);
  }
  const double decode_ns = load.num_running > 0 ? load.decode_step_ns : 0;
  // Prefill: every step carries the running decodes and fills the rest of its budget.
  const double tokens = ahead_tokens + own_tokens;
  const double per_step = std::max(1, load.step_tokens - std::min(load.num_running, load.seats));
  const double prefill_ns = std::ceil(tokens / per_step) * decode_ns + tokens * load.prefill_token_ns;
  // Seats: beyond the free ones, each waits for a running request to finish.
  const double short_of_seats = ahead_requests + own_requests - double(std::max(0, load.seats - load.num_running));
  // Until finishes are measured, the first seat frees when the shortest bounded answer ends, and the
  // rest as if finishes were spread evenly over the running set.
  double interval_ns = load.finish_interval_ns, first_ns = interval_ns;
  if (interval_ns <= 0 && load.min_remaining_tokens > 0 && load.num_running > 0) {
    first_ns = double(load.min_remaining_tokens) * decode_ns;
    interval_ns = first_ns / load.num_running;
  }
  double seats_ns = 0;
  if (short_of_seats > 0 && first_ns > 0 && !under_seat_share)
    seats_ns = first_ns + (short_of_seats - 1) * interval_ns + double(a.tokens) * load.prefill_token_ns + decode_ns;
  return int64_t(std::max(prefill_ns, seats_ns));
}

void ForecastCalibration::observe(double forecast_ns, double actual_ns) {
  constexpr double kKeep = 0.97;  // about the last 30 requests
  if (!(forecast_ns > 0) || !(actual_ns >= 0)) return;
  forecast_sum_ = kKeep * forecast_sum_ + forecast_ns;
  actual_sum_ = kKeep * actual_sum_ + actual_ns;
  ++samples_;
}

double ForecastCalibration::factor() const {
  if (samples_ < kMinSamples || forecast_sum_ <= 0) return 1.0;
  return std::clamp(actual_sum_ / forecast_sum_, kMinFactor, kMaxFactor);
}

}  // namespace kvasir::sched
