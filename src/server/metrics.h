// Prometheus metrics in the text exposition format (0.0.4), named like vLLM's with a `kvasir:`
// prefix so that vLLM dashboards work after a rename. Engine gauges and counters are read from
// EngineStats when scraped; latency histograms are observed by the server as requests finish.
//
// Besides the plain histograms, each latency is also kept per (input length, output length) bucket,
// powers of two, as `kvasir:<name>_by_length_seconds{input_len="65-128",output_len="17-32"}`, so a
// scrape shows how TTFT grows with the prompt and TPOT with the answer.
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

// "1", "2", "3-4", "5-8", ...: the power-of-two bucket (2^(k-1), 2^k] that holds n (n >= 1; 0 -> "0").
std::string length_bucket(int64_t n);

// What the server saw of one finished engine request. Times in seconds; negative: not applicable.
struct RequestRecord {
  double queue_s = -1, ttft_s = -1, e2e_s = -1, tpot_s = -1;
  std::vector<double> itl_s;  // gaps between consecutive output tokens
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string finish_reason;  // "stop", "length", "abort"
};

// Engine state at scrape time (a copy of the fields of engine::EngineStats we export), so this
// file needs no engine header and is unit-tested alone.
struct EngineGauges {
  int64_t num_running = 0, num_waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_prefill_held = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
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
  explicit Metrics(std::string model_name);
  void observe(const RequestRecord& record);  // thread-safe
  void count_http_error(int status);          // 4xx/5xx answers, by status code
  // The whole exposition. `gauges` is null while the model is loading; `http` may be null.
  std::string render(const EngineGauges* gauges, const HttpGauges* http = nullptr) const;

 private:
  struct Latencies {
    Latencies();
    Histogram ttft, itl, e2e, queue, tpot;
  };
  std::string model_name_;
  mutable std::mutex mutex_;
  Latencies all_;
  std::map<std::pair<int64_t, int64_t>, Latencies> by_length_;  // key: bucket upper bounds (input, output)
  std::map<std::string, uint64_t> finished_;                    // by finish reason
  std::map<int, uint64_t> http_errors_;
};

}  // namespace kvasir::server
