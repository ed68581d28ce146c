// Prometheus exposition: exact lines, cumulative buckets, length buckets.
#include <gtest/gtest.h>

#include <algorithm>

#include "server/metrics.h"

namespace kvasir::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Metrics, LengthClasses) {
  EXPECT_EQ(input_length_class(0), "0");
  EXPECT_EQ(input_length_class(1), "1-512");
  EXPECT_EQ(input_length_class(512), "1-512");
  EXPECT_EQ(input_length_class(513), "513-2048");
  EXPECT_EQ(input_length_class(8192), "2049-8192");
  EXPECT_EQ(input_length_class(8193), "8193+");
  EXPECT_EQ(input_length_class(int64_t(1) << 40), "8193+");
  EXPECT_EQ(output_length_class(128), "1-128");
  EXPECT_EQ(output_length_class(129), "129-1024");
  EXPECT_EQ(output_length_class(5000), "1025+");
}

// The exposition is bounded: requests of every length add no series past the fixed classes.
TEST(Metrics, ExpositionSizeDoesNotGrowWithTraffic) {
  Metrics m("m");
  RequestRecord r;
  r.ttft_s = r.e2e_s = r.tpot_s = r.queue_s = 0.01;
  r.itl_s = {0.01};
  r.finish_reason = "stop";
  auto lines = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
  std::ptrdiff_t after_first_round = 0;
  size_t bytes = 0;
  for (int round = 0; round < 2; ++round) {
    for (int64_t p = 1; p <= 40000; p = p * 3 / 2 + 1)
      for (int64_t c = 1; c <= 5000; c = c * 2 + 1) {
        r.prompt_tokens = p;
        r.completion_tokens = c;
        m.observe(r);
      }
    const std::string text = m.render(nullptr);
    if (round == 0) after_first_round = lines(text), bytes = text.size();
    else EXPECT_EQ(lines(text), after_first_round);  // the same series, larger counts
  }
  EXPECT_LT(bytes, size_t(100) << 10);
}

// --metrics-prefix vllm: every family renamed, in samples and in HELP / TYPE lines.
TEST(Metrics, VllmPrefix) {
  Metrics m("m", "vllm:");
  const std::string text = m.render(nullptr);
  EXPECT_EQ(text.find("kvasir:"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "# TYPE vllm:time_to_first_token_seconds histogram"));
  EXPECT_TRUE(has_line(text, "vllm:model_loaded{model_name=\"m\"} 0"));
  EXPECT_TRUE(has_line(text, "vllm:time_per_output_token_seconds_count{model_name=\"m\"} 0"));
}

TEST(Metrics, HistogramBucketsAreUpperInclusive) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le="0.1" holds 0.1 itself
  h.observe(0.5);
  h.observe(7.0);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 1, 1}));
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 7.65);
}

TEST(Metrics, RenderWhileLoading) {
  Metrics m("tiny");
  const std::string text = m.render(nullptr);
  EXPECT_TRUE(has_line(text, "kvasir:model_loaded{model_name=\"tiny\"} 0")) << text;
  EXPECT_EQ(text.find("kvasir:num_requests_running"), std::string::npos);
  EXPECT_TRUE(has_line(text, "# TYPE kvasir:time_to_first_token_seconds histogram"));
  EXPECT_TRUE(has_line(text, "kvasir:time_to_first_token_seconds_count{model_name=\"tiny\"} 0"));
}

TEST(Metrics, RenderGaugesCountersAndHistograms) {
  Metrics m("m\"1");  // the label value is escaped
  RequestRecord r;
  r.queue_s = 0.002;
  r.ttft_s = 0.03;
  r.e2e_s = 0.5;
  r.tpot_s = 0.01;
  r.itl_s = {0.01, 0.02};
  r.prompt_tokens = 100;
  r.completion_tokens = 3;
  r.finish_reason = "length";
  m.observe(r);
  r.finish_reason = "abort";
  r.prompt_tokens = 1;
  m.observe(r);
  m.count_http_error(400);
  m.count_http_error(400);
  EngineGauges g{.num_running = 3, .num_waiting = 1, .kv_blocks_total = 400, .kv_blocks_used = 100,
                 .prefix_query_tokens = 50, .prefix_hit_tokens = 32, .num_preemptions = 2,
                 .num_prefill_held = 9, .prompt_tokens_total = 1000, .generation_tokens_total = 77,
                 .spec_drafts = 5, .spec_draft_tokens = 9, .spec_accepted_tokens = 6,
                 .spec_draft_tokens_at = {5, 4}, .spec_accepted_tokens_at = {4, 2},
                 .kv_layers = 18, .kv_quantized_layers = 16, .kv_guard_kld = 0.0125};
  const std::string text = m.render(&g);
  const std::string L = "model_name=\"m\\\"1\"";
  for (const std::string& line : std::vector<std::string>{
           "kvasir:model_loaded{" + L + "} 1",
           "kvasir:num_requests_running{" + L + "} 3",
           "kvasir:num_requests_waiting{" + L + "} 1",
           "kvasir:kv_cache_usage_perc{" + L + "} 0.25",
           "kvasir:kv_cache_quantized_layers{" + L + "} 16",
           "kvasir:kv_guard_kld{" + L + "} 0.0125",
           "kvasir:prefix_cache_queries_total{" + L + "} 50",
           "kvasir:prefix_cache_hits_total{" + L + "} 32",
           "kvasir:prompt_tokens_total{" + L + "} 1000",
           "kvasir:generation_tokens_total{" + L + "} 77",
           "kvasir:num_preemptions_total{" + L + "} 2",
           "kvasir:prefill_held_steps_total{" + L + "} 9",
           "kvasir:request_success_total{" + L + ",finished_reason=\"length\"} 1",
           "kvasir:request_success_total{" + L + ",finished_reason=\"abort\"} 1",
           "kvasir:request_success_total{" + L + ",finished_reason=\"stop\"} 0",
           "kvasir:http_errors_total{" + L + ",status=\"400\"} 2",
           "kvasir:spec_decode_num_draft_tokens_total{" + L + "} 9",
           "kvasir:spec_decode_num_draft_tokens_per_pos_total{" + L + ",position=\"0\"} 5",
           "kvasir:spec_decode_num_accepted_tokens_per_pos_total{" + L + ",position=\"1\"} 2",
           std::string("# TYPE kvasir:num_preemptions_total counter"),
           std::string("# TYPE kvasir:kv_cache_usage_perc gauge"),
           // 0.03 s: not in le=0.02, in le=0.04, cumulative from there on.
           "kvasir:time_to_first_token_seconds_bucket{" + L + ",le=\"0.02\"} 0",
           "kvasir:time_to_first_token_seconds_bucket{" + L + ",le=\"0.04\"} 2",
           "kvasir:time_to_first_token_seconds_bucket{" + L + ",le=\"+Inf\"} 2",
           "kvasir:time_to_first_token_seconds_sum{" + L + "} 0.06",
           "kvasir:time_to_first_token_seconds_count{" + L + "} 2",
           "kvasir:inter_token_latency_seconds_count{" + L + "} 4",
           "kvasir:inter_token_latency_seconds_bucket{" + L + ",le=\"0.01\"} 2",
           "kvasir:e2e_request_latency_seconds_count{" + L + "} 2",
           "kvasir:request_queue_time_seconds_count{" + L + "} 2",
           "kvasir:request_time_per_output_token_seconds_count{" + L + "} 2",
           "kvasir:time_per_output_token_seconds_count{" + L + "} 4",
           "kvasir:request_prompt_tokens_bucket{" + L + ",le=\"1\"} 1",
           "kvasir:request_prompt_tokens_bucket{" + L + ",le=\"100\"} 2",
           "kvasir:request_prompt_tokens_sum{" + L + "} 101",
           "kvasir:request_generation_tokens_bucket{" + L + ",le=\"2\"} 0",
           "kvasir:request_generation_tokens_bucket{" + L + ",le=\"5\"} 2",
           std::string("# TYPE kvasir:time_to_first_token_by_length_seconds histogram"),
           "kvasir:time_to_first_token_by_length_seconds_count{" + L + ",input_len=\"1-512\",output_len=\"1-128\"} 2",
           "kvasir:request_time_per_output_token_by_length_seconds_count{" + L + ",input_len=\"1-512\",output_len=\"1-128\"} 2",
           "kvasir:request_time_per_output_token_by_length_seconds_bucket{" + L + ",input_len=\"1-512\",output_len=\"1-128\",le=\"+Inf\"} 2",
       }) {
    EXPECT_TRUE(has_line(text, line)) << "missing: " << line << "\n" << text;
  }
  // Every sample line is `name{labels} value`, and every family has HELP and TYPE.
  size_t types = 0, helps = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    ASSERT_NE(nl, std::string::npos) << "the exposition ends with a newline";
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("# TYPE ", 0) == 0) ++types;
    else if (line.rfind("# HELP ", 0) == 0) ++helps;
    else {
      EXPECT_EQ(line.rfind("kvasir:", 0), 0u) << line;
      EXPECT_NE(line.find("} "), std::string::npos) << line;
    }
  }
  EXPECT_EQ(types, helps);
}

}  // namespace
}  // namespace kvasir::server
