// Runs a list of requests against a server, closed loop (a fixed number of clients, each sending
// its next request when the previous one finished) or open loop (arrivals at a Poisson rate, or
// gamma-distributed gaps with shape `burstiness`: 1 is Poisson, < 1 burstier, > 1 more regular).
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "loadgen/client.h"
#include "loadgen/stats.h"
#include "loadgen/workload.h"

namespace kvasir::loadgen {

struct LoadPoint {
  enum class Mode { closed, open };
  Mode mode = Mode::closed;
  int64_t concurrency = 1;  // closed loop: clients
  double rate = std::numeric_limits<double>::infinity();  // open loop: requests per second (inf: all at once)
  double burstiness = 1.0;
  int64_t max_concurrency = 0;  // open loop: cap on requests in flight (0: none)
  uint64_t seed = 0;

  std::string label() const;  // "c=8" or "rate=4.0"
};

struct RunResult {
  LoadPoint load;
  std::vector<RequestOutcome> outcomes;
  double duration_s = 0;
};

// Gaps between arrivals (seconds) for `n` requests: gamma(shape = burstiness, mean = 1 / rate).
std::vector<double> arrival_gaps(int64_t n, double rate, double burstiness, uint64_t seed);

RunResult run_load(const ClientOptions& client, const std::string& model, const std::vector<RequestSpec>& requests,
                   const LoadPoint& load);

// Several tenants at once from one time origin, each with its own key, requests and load; the
// outcomes come back together, each labelled with its tenant.
struct TenantLoad {
  std::string name;
  ClientOptions client;
  std::vector<RequestSpec> requests;
  LoadPoint load;
};
RunResult run_tenants(const std::vector<TenantLoad>& tenants, const std::string& model);

}  // namespace kvasir::loadgen
