// Prometheus metrics in the text exposition format (0.0.4), named like vLLM's with a `kvasir:`
// prefix (`serve --metrics-prefix vllm` writes `vllm:`, so that vLLM's dashboards work as they
// are). Engine gauges and counters are read from EngineStats when scraped; latency histograms are
// observed by the server as requests finish.
//
// Besides the plain histograms, TTFT and TPOT are also kept per (input length, output length)
// class, fixed classes, as `kvasir:<name>_by_length_seconds{input_len="513-2048",output_len="1-128"}`,
// so a scrape shows how TTFT grows with the prompt and TPOT with the answer, in a bounded number
// of series whatever the traffic.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "disagg/counters.h"

namespace kvasir::server {

// Cumulative histogram with fixed upper bounds (seconds); +Inf is implicit.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, not cumulative; last is +Inf
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// The by-length histograms' classes, fixed so that the exposition does not grow with traffic:
// input "1-512", "513-2048", "2049-8192", "8193+"; output "1-128", "129-1024", "1025+"; 0 -> "0".
std::string input_length_class(int64_t n);
std::string output_length_class(int64_t n);

// What the server saw of one finished engine request. Times in seconds; negative: not applicable.
struct RequestRecord {
  double queue_s = -1, ttft_s = -1, e2e_s = -1, tpot_s = -1;
  std::vector<double> itl_s;  // gaps between consecutive output tokens
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string finish_reason;  // "stop", "length", "abort"
  // Serving under SLOs: the request's class ("interactive", "batch"), tenant ("" : the shared
  // one) and TTFT deadline (seconds; <= 0: none), for the goodput counters.
  std::string service_class = "interactive", tenant;
  double ttft_deadline_s = 0;
};

// Engine state at scrape time (a copy of the fields of engine::EngineStats we export), so this
// file needs no engine header and is unit-tested alone.
struct EngineGauges {
  int64_t num_running = 0, num_waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_yields = 0;
  int64_t num_prefill_held = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  // The prefix cache's stores beyond memory (--kv-disk, --kv-store), by tier.
  struct KvTier {
    std::string tier;
    int64_t loaded_blocks = 0, misses = 0, corrupt = 0, writes = 0, write_errors = 0, dropped = 0, evictions = 0;
    uint64_t bytes_read = 0, bytes_written = 0, bytes_stored = 0;
  };
  std::vector<KvTier> kv_tiers;
  int64_t kv_tier_loads = 0, kv_tier_saved_blocks = 0;
  double kv_tier_load_seconds = 0;
  std::vector<int64_t> iteration_tokens;        // per bucket of iteration_token_bounds, then above them
  std::vector<int64_t> iteration_token_bounds;  // engine::kIterationTokenBounds
  int64_t iteration_tokens_sum = 0;
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_draft_tokens_at, spec_accepted_tokens_at;  // per draft position
  int64_t kv_layers = 0, kv_quantized_layers = 0;
  double kv_guard_kld = -1;  // -1: no KV guard ran
  // Disaggregation: KV pushed (a prefill instance) and pulled (a decode instance).
  std::optional<disagg::PushCounters> push;  // a prefill instance's
  std::optional<disagg::PullCounters> pull;  // a decode instance's
};

// The HTTP transport at scrape time.
struct HttpGauges {
  int64_t connections_open = 0, connections_refused = 0, requests_in_flight = 0;
};

class Metrics {
 public:
  // `prefix`: every family's name starts with it ("kvasir:", or "vllm:" for vLLM's dashboards).
  explicit Metrics(std::string model_name, std::string prefix = "kvasir:");
  void observe(const RequestRecord& record);  // thread-safe
  void count_http_error(int status);          // 4xx/5xx answers, by status code
  // A request admission refused (its TTFT forecast missed its deadline): counted as such in the
  // goodput counters.
  void record_refused(const std::string& service_class, const std::string& tenant);
  // The TPOT bound a request must also meet to count as served within its SLO (seconds; 0: none).
  void set_tpot_slo(double seconds);
  // Distinct tenant labels kept in the goodput counters; later tenants count as "other".
  static constexpr size_t kMaxTenantLabels = 64;
  // The whole exposition. `gauges` is null while the model is loading; `http` may be null.
  std::string render(const EngineGauges* gauges, const HttpGauges* http = nullptr) const;

 private:
  struct Latencies {
    Latencies();
    Histogram ttft, itl, e2e, queue, tpot;
  };
  std::string model_name_, prefix_;
  mutable std::mutex mutex_;
  Latencies all_;
  Histogram prompt_tokens_, generation_tokens_;                 // per finished request
  std::map<std::pair<std::string, std::string>, Latencies> by_length_;  // key: length classes (input, output)
  std::map<std::string, uint64_t> finished_;                    // by finish reason
  std::map<int, uint64_t> http_errors_;
  // Goodput: by (class, tenant label), requests that met their SLO, missed it, were refused.
  struct SloCounts {
    uint64_t met = 0, missed = 0, refused = 0;
  };
  SloCounts& slo_cell(const std::string& service_class, const std::string& tenant);  // under mutex_
  std::map<std::pair<std::string, std::string>, SloCounts> slo_;
  double tpot_slo_s_ = 0;
};

}  // namespace kvasir::server
