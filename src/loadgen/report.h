// What a sweep reports: a Markdown table (one row per load point), a JSON document with
// `vllm bench serve` field names, and the three SVG charts.
#pragma once
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/runner.h"
#include "loadgen/stats.h"

namespace kvasir::loadgen {

struct SweepPoint {
  RunResult run;
  RunMetrics metrics;
};

enum class KneeMetric { ttft, tpot, itl, e2el };
const char* knee_metric_name(KneeMetric m);
// The P99 (or highest requested percentile) of the metric, in ms.
double tail_of(const RunMetrics& m, KneeMetric metric);

std::string markdown_table(std::span<const SweepPoint> points);
// Per-run object: load settings, metrics, and with `detailed` the per-request arrays
// (input_lens, output_lens, ttfts, itls, errors) as vLLM writes them.
nlohmann::ordered_json run_json(const SweepPoint& point, bool detailed);

struct ChartFiles {
  std::string ttft_heatmap, tpot_heatmap, throughput_curve;
};
// Writes ttft_heatmap.svg, tpot_heatmap.svg and throughput_p99.svg into `dir`.
Result<ChartFiles> write_charts(const std::string& dir, std::span<const SweepPoint> points, KneeMetric metric,
                                int& knee);

}  // namespace kvasir::loadgen
