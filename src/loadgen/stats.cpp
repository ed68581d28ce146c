#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace kvasir::loadgen {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

Summary summarize(std::span<const double> values, std::span<const double> percentiles) {
  Summary s;
  std::vector<double> v(values.begin(), values.end());
  if (!v.empty()) {
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double var = 0;
    for (double x : v) var += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(var / double(v.size()));  // population std, as numpy.std
    s.median = percentile(v, 50);
  }
  for (double p : percentiles) s.percentiles.emplace_back(p, percentile(v, p));
  return s;
}

double request_tpot(const RequestOutcome& o) {
  if (!o.success || o.output_tokens < 2) return -1;
  return (o.latency_s - o.ttft_s) / double(o.output_tokens - 1);
}

bool meets_slo(const RequestOutcome& o, const SloSpec& slo) {
  if (!o.success) return false;
  if (slo.ttft_ms > 0 && o.ttft_s * 1e3 > slo.ttft_ms) return false;
  const double tpot = request_tpot(o);
  return !(slo.tpot_ms > 0 && tpot >= 0 && tpot * 1e3 > slo.tpot_ms);
}

RunMetrics compute_metrics(std::span<const RequestOutcome> outcomes, double duration_s,
                           std::span<const double> percentiles, const SloSpec& slo) {
  RunMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end) for the concurrency peak
  for (const RequestOutcome& o : outcomes) {
    edges.emplace_back(o.start_s, +1);
    edges.emplace_back(o.start_s + o.latency_s, -1);
    m.refused += o.http_status == 429 ? 1 : 0;
    m.slo_met += meets_slo(o, slo) ? 1 : 0;
    if (!o.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += o.input_tokens;
    m.total_output += o.output_tokens;
    ttft.push_back(o.ttft_s * 1e3);
    e2el.push_back(o.latency_s * 1e3);
    if (const double t = request_tpot(o); t >= 0) tpot.push_back(t * 1e3);
    for (double g : o.itl_s) itl.push_back(g * 1e3);
  }
  std::sort(edges.begin(), edges.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first < b.first : a.second < b.second; });
  int64_t live = 0;
  for (auto& [t, d] : edges) m.max_concurrent = std::max(m.max_concurrent, live += d);
  if (duration_s > 0) {
    m.request_throughput = double(m.completed) / duration_s;
    m.output_throughput = double(m.total_output) / duration_s;
    m.total_token_throughput = double(m.total_input + m.total_output) / duration_s;
    m.goodput = double(m.slo_met) / duration_s;
  }
  m.ttft_ms = summarize(ttft, percentiles);
  m.tpot_ms = summarize(tpot, percentiles);
  m.itl_ms = summarize(itl, percentiles);
  m.e2el_ms = summarize(e2el, percentiles);
  return m;
}

std::string percentile_name(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", p);
  return buf;
}

nlohmann::ordered_json metrics_json(const RunMetrics& m) {
  nlohmann::ordered_json j;
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["max_concurrent_requests"] = m.max_concurrent;
  j["request_goodput"] = m.goodput;
  j["slo_met"] = m.slo_met;
  j["refused"] = m.refused;
  auto add = [&](const char* name, const Summary& s) {
    j[std::string("mean_") + name + "_ms"] = s.mean;
    j[std::string("median_") + name + "_ms"] = s.median;
    j[std::string("std_") + name + "_ms"] = s.std;
    for (auto& [p, v] : s.percentiles) j["p" + percentile_name(p) + "_" + name + "_ms"] = v;
  };
  add("ttft", m.ttft_ms);
  add("tpot", m.tpot_ms);
  add("itl", m.itl_ms);
  add("e2el", m.e2el_ms);
  return j;
}

}  // namespace kvasir::loadgen
