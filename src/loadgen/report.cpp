#include "loadgen/report.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loadgen/svg.h"

namespace kvasir::loadgen {

namespace {

std::string f1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}
std::string f2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

double pct(const Summary& s, double p) {
  for (auto& [q, v] : s.percentiles)
    if (q == p) return v;
  return NAN;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return Error{"cannot write " + path};
  out << text;
  return out ? Status{} : Status{Error{"cannot write " + path}};
}

}  // namespace

const char* knee_metric_name(KneeMetric m) {
  switch (m) {
    case KneeMetric::ttft: return "ttft";
    case KneeMetric::tpot: return "tpot";
    case KneeMetric::itl: return "itl";
    case KneeMetric::e2el: return "e2el";
  }
  return "e2el";
}

double tail_of(const RunMetrics& m, KneeMetric metric) {
  const Summary& s = metric == KneeMetric::ttft ? m.ttft_ms
                     : metric == KneeMetric::tpot ? m.tpot_ms
                     : metric == KneeMetric::itl  ? m.itl_ms
                                                  : m.e2el_ms;
  const double p99 = pct(s, 99);
  if (!std::isnan(p99)) return p99;
  return s.percentiles.empty() ? s.mean : s.percentiles.back().second;
}

std::string markdown_table(std::span<const SweepPoint> points) {
  std::vector<double> ps;
  if (!points.empty())
    for (auto& [p, v] : points.front().metrics.ttft_ms.percentiles) ps.push_back(p);
  std::string head = "| load | ok | fail | req/s | out tok/s |";
  std::string rule = "|---|---:|---:|---:|---:|";
  for (const char* name : {"TTFT", "TPOT", "ITL", "E2E"}) {
    head += std::string(" ") + name + " mean |";
    rule += "---:|";
    for (double p : ps) {
      head += std::string(" ") + name + " p" + percentile_name(p) + " |";
      rule += "---:|";
    }
  }
  std::string out = head + "\n" + rule + "\n";
  for (const SweepPoint& sp : points) {
    const RunMetrics& m = sp.metrics;
    out += "| " + sp.run.load.label() + " | " + std::to_string(m.completed) + " | " + std::to_string(m.failed) + " | " +
           f2(m.request_throughput) + " | " + f1(m.output_throughput) + " |";
    for (const Summary* s : {&m.ttft_ms, &m.tpot_ms, &m.itl_ms, &m.e2el_ms}) {
      out += " " + f1(s->mean) + " |";
      for (double p : ps) out += " " + f1(pct(*s, p)) + " |";
    }
    out += "\n";
  }
  out += "\nLatencies in ms; TTFT = time to first token, TPOT = time per output token after the first, "
         "ITL = gap between streamed chunks, E2E = request latency.\n";
  return out;
}

nlohmann::ordered_json run_json(const SweepPoint& sp, bool detailed) {
  nlohmann::ordered_json j;
  const LoadPoint& l = sp.run.load;
  j["label"] = l.label();
  j["mode"] = l.mode == LoadPoint::Mode::closed ? "closed" : "open";
  if (l.mode == LoadPoint::Mode::closed) {
    j["max_concurrency"] = l.concurrency;
    j["request_rate"] = "inf";
  } else {
    j["max_concurrency"] = l.max_concurrency > 0 ? nlohmann::ordered_json(l.max_concurrency) : nlohmann::ordered_json(nullptr);
    j["request_rate"] = std::isinf(l.rate) ? nlohmann::ordered_json("inf") : nlohmann::ordered_json(l.rate);
    j["burstiness"] = l.burstiness;
  }
  const nlohmann::ordered_json metrics = metrics_json(sp.metrics);
  for (auto it = metrics.begin(); it != metrics.end(); ++it) j[it.key()] = it.value();
  if (detailed) {
    const auto empty = nlohmann::ordered_json::array();
    nlohmann::ordered_json in = empty, out = empty, ttfts = empty, itls = empty, errors = empty;
    for (const RequestOutcome& o : sp.run.outcomes) {
      in.push_back(o.input_tokens);
      out.push_back(o.output_tokens);
      ttfts.push_back(o.success ? o.ttft_s : 0.0);
      itls.push_back(o.itl_s);
      errors.push_back(o.error);
    }
    j["input_lens"] = std::move(in);
    j["output_lens"] = std::move(out);
    j["ttfts"] = std::move(ttfts);
    j["itls"] = std::move(itls);
    j["errors"] = std::move(errors);
  }
  return j;
}

Result<ChartFiles> write_charts(const std::string& dir, std::span<const SweepPoint> points, KneeMetric metric,
                                int& knee) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{"cannot create " + dir + ": " + ec.message()};
  std::vector<HeatSample> ttft, tpot;
  for (const SweepPoint& sp : points) {
    for (const RequestOutcome& o : sp.run.outcomes) {
      if (!o.success) continue;
      ttft.push_back({o.input_tokens, o.output_tokens, o.ttft_s * 1e3});
      if (const double t = request_tpot(o); t >= 0) tpot.push_back({o.input_tokens, o.output_tokens, t * 1e3});
    }
  }
  std::vector<CurvePoint> curve;
  for (const SweepPoint& sp : points)
    curve.push_back({sp.run.load.label(), sp.metrics.output_throughput, tail_of(sp.metrics, metric)});
  knee = find_knee(curve);
  ChartFiles files{.ttft_heatmap = dir + "/ttft_heatmap.svg",
                   .tpot_heatmap = dir + "/tpot_heatmap.svg",
                   .throughput_curve = dir + "/throughput_p99.svg"};
  const std::string scope = points.size() > 1 ? " (all runs of the sweep)" : "";
  if (auto s = write_file(files.ttft_heatmap, heatmap_svg("TTFT by input x output length" + scope, "TTFT (ms)", ttft)); !s)
    return Error{s.error()};
  if (auto s = write_file(files.tpot_heatmap, heatmap_svg("TPOT by input x output length" + scope, "TPOT (ms)", tpot)); !s)
    return Error{s.error()};
  const std::string y = std::string("P99 ") + knee_metric_name(metric) + " (ms)";
  if (auto s = write_file(files.throughput_curve,
                          curve_svg("Output throughput vs " + y, "output tokens/s", y, curve, knee));
      !s)
    return Error{s.error()};
  return files;
}

}  // namespace kvasir::loadgen
