// Latency statistics of a load-generator run, named as `vllm bench serve` names them
// (mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms, request_throughput, ...).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvasir::loadgen {

// What the client saw of one request. Times in seconds from when the request was sent.
struct RequestOutcome {
  bool success = false;
  std::string error = {};
  double start_s = 0;     // send time, relative to the start of the run
  double ttft_s = 0;      // first chunk with text
  double latency_s = 0;   // last byte of the response
  std::vector<double> itl_s = {};  // gaps between consecutive chunks with text
  int64_t input_tokens = 0, output_tokens = 0;
  std::string text = {};
  int http_status = 0;     // 0: no answer
  std::string tenant = {}; // a multi-tenant run's tenant
};

// What a request must meet to count toward goodput (ms; 0: no bound).
struct SloSpec {
  double ttft_ms = 0, tpot_ms = 0;
};
// Whether a request succeeded within the SLO.
bool meets_slo(const RequestOutcome& o, const SloSpec& slo);

// Linear interpolation between closest ranks (numpy's default). p in [0, 100]; empty: 0.
double percentile(std::vector<double> values, double p);

struct Summary {
  double mean = 0, median = 0, std = 0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
};
Summary summarize(std::span<const double> values, std::span<const double> percentiles);

// Everything a run reports.
struct RunMetrics {
  double duration_s = 0;
  int64_t completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  Summary ttft_ms, tpot_ms, itl_ms, e2el_ms;
  int64_t max_concurrent = 0;  // most requests in flight at once, as observed
  // Goodput (DistServe's): requests served within the SLO, per second; refused: answered 429.
  int64_t slo_met = 0, refused = 0;
  double goodput = 0;
};

RunMetrics compute_metrics(std::span<const RequestOutcome> outcomes, double duration_s,
                           std::span<const double> percentiles, const SloSpec& slo = {});
// TPOT of one request: (latency - ttft) / (output_tokens - 1); negative when undefined.
double request_tpot(const RequestOutcome& o);

// JSON with vLLM's field names; `p99_ttft_ms` etc. for each requested percentile.
nlohmann::ordered_json metrics_json(const RunMetrics& m);
// "99" for 99, "99.9" for 99.9: the percentile as vLLM writes it in field names.
std::string percentile_name(double p);

}  // namespace kvasir::loadgen
