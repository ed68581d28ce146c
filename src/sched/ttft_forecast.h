// When would a request arriving now get its first token? A forecast from what the queue holds and
// the step costs the scheduler measured (StepCostModel), taken in the scheduler's own order: work
// of a better class or priority goes first, work of a worse one yields, and at the request's own
// level another tenant's backlog goes ahead only as far as fair share lets it (while the newcomer's
// tenant is served t tokens, a tenant of weight w beside it is served t * w / w_own), and a tenant
// below its share of the level's seats waits for none (another tenant's request yields one). Admission
// (engine::Engine::submit) refuses a request whose forecast misses its TTFT deadline.
//
// What it does not know: prefix-cache hits (a prompt counts whole, so the forecast errs late for
// cached prompts) and the blocks the queue will need (KV is a seat constraint only via preemption).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sched/request.h"

namespace kvasir::sched {

struct Backlog {
  ServiceClass service_class = ServiceClass::interactive;
  int32_t priority = 0;
  std::string tenant;
  double weight = 1.0;
  int64_t tokens = 0;    // prompt rows still to compute
  int32_t requests = 0;  // of them waiting for a seat
  int32_t seats = 0;     // seats its running requests hold
};

struct QueueLoad {
  std::vector<Backlog> backlog;     // waiting and mid-prefill work, one entry per class, priority and tenant
  int32_t num_running = 0;          // sequences holding a seat
  int32_t seats = 1;                // sequences that may run at once (max_seqs, fewer under a TPOT target)
  int32_t step_tokens = 1;          // a step's token budget
  double decode_step_ns = -1;       // a step of num_running decodes alone; -1: not measured
  double prefill_token_ns = 0;      // each prefill token on top of it; 0: not measured
  double finish_interval_ns = 0;    // time between two requests finishing while busy; 0: not measured
  int32_t min_remaining_tokens = 0; // fewest tokens a running request may still generate (0: none bounded)
};

struct Arrival {
  ServiceClass service_class = ServiceClass::interactive;
  int32_t priority = 0;
  std::string tenant;
  double weight = 1.0;
  int64_t tokens = 0;  // its prompt
};

// Adds `a` to the load as one more waiting request (what queued since the load was measured).
void add_arrival(QueueLoad& load, const Arrival& a);

// Nanoseconds from now to `a`'s first token; -1 when the costs it needs are not measured yet.
int64_t forecast_ttft_ns(const QueueLoad& load, const Arrival& a);

// What the forecast misses (arrivals of other tenants that fair share lets ahead later, costs
// that drift, prefix hits), learned from the requests it admitted: factor() is the decayed ratio
// of their measured TTFTs to their forecasts, which admission multiplies forecasts by.
class ForecastCalibration {
 public:
  static constexpr int kMinSamples = 8;
  static constexpr double kMinFactor = 0.5, kMaxFactor = 4.0;
  void observe(double forecast_ns, double actual_ns);
  double factor() const;  // 1 until kMinSamples were observed

 private:
  double forecast_sum_ = 0, actual_sum_ = 0;
  int samples_ = 0;
};

}  // namespace kvasir::sched
