// `kvasir loadgen --url URL [--concurrency 1,2,4 | --rate 1,2,inf] [workload] [reports]`: drives an
// OpenAI-compatible server (kvasir serve, vLLM, llama.cpp) with streaming requests and reports
// what a client sees, with `vllm bench serve` metric names.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "loadgen/client.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "loadgen/workload.h"

namespace kvasir::cli {
namespace {

struct LoadgenArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string endpoint = "completions";
  std::string model, api_key;
  std::string concurrency, rate;
  double burstiness = 1.0;
  int64_t max_concurrency = 0;
  int64_t num_prompts = 64;
  std::string input_len = "128", output_len = "128";
  std::string dataset = "random";
  std::string prompt_file;
  int64_t prefix_len = 256, num_prefixes = 1, turns = 4;
  bool no_ignore_eos = false;
  double temperature = 0;
  uint64_t seed = 0;
  std::string percentiles = "50,90,99";
  std::string result_json, svg_dir, table_file;
  std::string knee_metric = "e2el";
  int64_t warmup = 2;
  bool detailed = false;
  double timeout_s = 600;
  std::vector<std::string> tenants;  // NAME:RATE[:KEY]
  double slo_ttft_ms = 0, slo_tpot_ms = 0;
};

struct TenantArg {
  std::string name, key;
  double rate = 0;
};

Result<TenantArg> parse_tenant(const std::string& text) {
  const size_t a = text.find(':');
  if (a == std::string::npos || a == 0) return Error{"--tenant wants NAME:RATE[:KEY], got '" + text + "'"};
  const size_t b = text.find(':', a + 1);
  TenantArg t{.name = text.substr(0, a), .key = b == std::string::npos ? "" : text.substr(b + 1)};
  const std::string rate = text.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  char* end = nullptr;
  t.rate = std::strtod(rate.c_str(), &end);
  if (rate.empty() || end != rate.c_str() + rate.size() || !(t.rate > 0) || std::isinf(t.rate))
    return Error{"--tenant " + text + ": the rate must be a positive number of requests per second"};
  return t;
}

// The per-tenant table of a multi-tenant run: what each tenant saw, and the whole.
std::string tenant_table(const std::vector<TenantArg>& tenants, const loadgen::RunResult& run,
                         std::span<const double> pcts, const loadgen::SloSpec& slo) {
  std::string out = "| tenant | rate (req/s) | completed | refused (429) | failed | P50 TTFT (ms) | P99 TTFT (ms) | "
                    "P99 TPOT (ms) | goodput (req/s) |\n|---|---|---|---|---|---|---|---|---|\n";
  auto row = [&](const std::string& name, double rate, std::span<const loadgen::RequestOutcome> outcomes) {
    const auto m = loadgen::compute_metrics(outcomes, run.duration_s, pcts, slo);
    char buf[256];
    std::snprintf(buf, sizeof buf, "| %s | %.2f | %lld | %lld | %lld | %.0f | %.0f | %.1f | %.3f |\n", name.c_str(), rate,
                  (long long)m.completed, (long long)m.refused, (long long)(m.failed - m.refused),
                  m.ttft_ms.median,
                  loadgen::tail_of(m, loadgen::KneeMetric::ttft), loadgen::tail_of(m, loadgen::KneeMetric::tpot),
                  m.goodput);
    out += buf;
  };
  double total_rate = 0;
  for (const TenantArg& t : tenants) {
    std::vector<loadgen::RequestOutcome> mine;
    for (const auto& o : run.outcomes)
      if (o.tenant == t.name) mine.push_back(o);
    row(t.name, t.rate, mine);
    total_rate += t.rate;
  }
  row("all", total_rate, run.outcomes);
  return out;
}

Result<std::vector<double>> parse_numbers(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "inf") {
      out.push_back(INFINITY);
      continue;
    }
    try {
      size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size() || !(v > 0)) throw 0;
      out.push_back(v);
    } catch (...) {
      return Error{flag + ": expected positive numbers separated by commas, got '" + item + "'"};
    }
  }
  if (out.empty()) return Error{flag + ": empty list"};
  return out;
}

Result<std::vector<loadgen::LoadPoint>> load_points(const LoadgenArgs& a) {
  std::vector<loadgen::LoadPoint> points;
  if (!a.concurrency.empty() && !a.rate.empty()) return Error{"give --concurrency or --rate, not both"};
  if (!a.rate.empty() && a.dataset == "conversations")
    return Error{"--dataset conversations runs closed loop (--concurrency): a turn waits for the one before"};
  if (!a.rate.empty()) {
    auto rates = parse_numbers(a.rate, "--rate");
    if (!rates) return Error{rates.error()};
    for (double r : *rates)
      points.push_back({.mode = loadgen::LoadPoint::Mode::open, .rate = r, .burstiness = a.burstiness,
                        .max_concurrency = a.max_concurrency, .seed = a.seed});
    return points;
  }
  auto cs = parse_numbers(a.concurrency.empty() ? "1" : a.concurrency, "--concurrency");
  if (!cs) return Error{cs.error()};
  for (double c : *cs) {
    if (std::isinf(c) || c != std::floor(c)) return Error{"--concurrency takes whole numbers"};
    points.push_back({.mode = loadgen::LoadPoint::Mode::closed, .concurrency = int64_t(c), .seed = a.seed});
  }
  return points;
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) return Error{"cannot write " + path};
  return Status{};
}

int run_loadgen(const LoadgenArgs& a) {
  signal(SIGPIPE, SIG_IGN);
  loadgen::ClientOptions co{.url = a.url, .model = a.model, .api_key = a.api_key, .ignore_eos = !a.no_ignore_eos,
                            .temperature = a.temperature, .timeout_s = a.timeout_s};
  if (a.endpoint == "chat") co.endpoint = loadgen::Endpoint::chat;
  else if (a.endpoint != "completions") return fail("--endpoint must be completions or chat");
  if (auto u = loadgen::split_url(a.url); !u) return fail(u.error());
  if (!a.tenants.empty() && (!a.rate.empty() || !a.concurrency.empty()))
    return fail("--tenant sets each tenant's rate: leave out --rate and --concurrency");
  auto points = load_points(a);
  if (!points) return fail(points.error());
  auto pcts = parse_numbers(a.percentiles, "--percentiles");
  if (!pcts) return fail(pcts.error());
  loadgen::KneeMetric knee_metric;
  if (a.knee_metric == "ttft") knee_metric = loadgen::KneeMetric::ttft;
  else if (a.knee_metric == "tpot") knee_metric = loadgen::KneeMetric::tpot;
  else if (a.knee_metric == "itl") knee_metric = loadgen::KneeMetric::itl;
  else if (a.knee_metric == "e2el") knee_metric = loadgen::KneeMetric::e2el;
  else return fail("--knee-metric must be ttft, tpot, itl or e2el");

  loadgen::WorkloadOptions wo{.prefix_len = a.prefix_len, .num_prefixes = a.num_prefixes,
                              .prompt_file = a.prompt_file, .num_requests = a.num_prompts, .turns = a.turns,
                              .seed = a.seed};
  if (a.dataset == "random") wo.dataset = loadgen::Dataset::random;
  else if (a.dataset == "shared-prefix") wo.dataset = loadgen::Dataset::shared_prefix;
  else if (a.dataset == "conversations") wo.dataset = loadgen::Dataset::conversations;
  else if (a.dataset == "jsonl") wo.dataset = loadgen::Dataset::jsonl;
  else return fail("--dataset must be random, shared-prefix, conversations or jsonl");
  if (wo.dataset == loadgen::Dataset::jsonl && a.prompt_file.empty()) return fail("--dataset jsonl needs --prompt-file");
  auto in_len = loadgen::LengthSpec::parse(a.input_len);
  if (!in_len) return fail("--input-len: " + in_len.error());
  auto out_len = loadgen::LengthSpec::parse(a.output_len);
  if (!out_len) return fail("--output-len: " + out_len.error());
  wo.input_len = *in_len;
  wo.output_len = *out_len;

  loadgen::Client probe(co);
  std::string model = a.model;
  if (model.empty()) {
    auto m = probe.first_model();
    if (!m) return fail(m.error());
    model = *m;
  }
  // Exact prompt lengths need the server's tokenizer: token ids drawn from a tokenized filler text.
  std::vector<int32_t> pool;
  if (wo.dataset != loadgen::Dataset::jsonl && co.endpoint == loadgen::Endpoint::completions) {
    auto ids = probe.tokenize(loadgen::filler_text(4000, a.seed));
    if (ids && !ids->empty()) pool = std::move(*ids);
    else std::fprintf(stderr, "loadgen: no /tokenize (%s); prompt lengths are approximate (words)\n",
                      ids ? "empty" : ids.error().c_str());
  }
  auto requests = loadgen::build_workload(wo, pool);
  if (!requests) return fail(requests.error());
  std::fprintf(stderr, "loadgen: %s, model %s, %lld requests per run, input %s, output %s, dataset %s\n",
               a.url.c_str(), model.c_str(), (long long)a.num_prompts, wo.input_len.to_string().c_str(),
               wo.output_len.to_string().c_str(), a.dataset.c_str());

  if (a.warmup > 0) {
    std::vector<loadgen::RequestSpec> warm(requests->begin(), requests->begin() + std::min<size_t>(a.warmup, requests->size()));
    auto w = loadgen::run_load(co, model, warm, loadgen::LoadPoint{.concurrency = 1});
    for (auto& o : w.outcomes)
      if (!o.success) return fail("warm-up request failed: " + o.error);
  }

  const loadgen::SloSpec slo{.ttft_ms = a.slo_ttft_ms, .tpot_ms = a.slo_tpot_ms};
  if (!a.tenants.empty()) {
    // Several tenants, open loop each at its own rate, one run; requests split by rate.
    std::vector<TenantArg> targs;
    double total_rate = 0;
    for (const std::string& text : a.tenants) {
      auto t = parse_tenant(text);
      if (!t) return fail(t.error());
      total_rate += t->rate;
      targs.push_back(*t);
    }
    std::vector<loadgen::TenantLoad> loads;
    for (size_t i = 0; i < targs.size(); ++i) {
      loadgen::WorkloadOptions two = wo;
      two.seed = a.seed + 1000 * (i + 1);
      two.num_requests = std::max<int64_t>(1, std::llround(double(a.num_prompts) * targs[i].rate / total_rate));
      auto reqs = loadgen::build_workload(two, pool);
      if (!reqs) return fail(reqs.error());
      loadgen::ClientOptions tco = co;
      if (!targs[i].key.empty()) tco.api_key = targs[i].key;
      loads.push_back({.name = targs[i].name, .client = tco, .requests = std::move(*reqs),
                       .load = {.mode = loadgen::LoadPoint::Mode::open, .rate = targs[i].rate, .burstiness = a.burstiness,
                                .max_concurrency = a.max_concurrency, .seed = two.seed}});
    }
    std::fprintf(stderr, "loadgen: %zu tenants, %.2f req/s together ...\n", loads.size(), total_rate);
    loadgen::SweepPoint sp;
    sp.run = loadgen::run_tenants(loads, model);
    sp.metrics = loadgen::compute_metrics(sp.run.outcomes, sp.run.duration_s, *pcts, slo);
    const std::string table = tenant_table(targs, sp.run, *pcts, slo);
    std::fwrite(table.data(), 1, table.size(), stdout);
    if (!a.table_file.empty())
      if (auto s = write_text(a.table_file, table); !s) return fail(s.error());
    if (!a.result_json.empty()) {
      nlohmann::ordered_json doc = loadgen::run_json(sp, a.detailed);
      doc["slo_ttft_ms"] = a.slo_ttft_ms;
      doc["slo_tpot_ms"] = a.slo_tpot_ms;
      for (const TenantArg& t : targs) {
        std::vector<loadgen::RequestOutcome> mine;
        for (const auto& o : sp.run.outcomes)
          if (o.tenant == t.name) mine.push_back(o);
        auto m = loadgen::metrics_json(loadgen::compute_metrics(mine, sp.run.duration_s, *pcts, slo));
        m["rate"] = t.rate;
        doc["tenants"][t.name] = std::move(m);
      }
      if (auto s = write_text(a.result_json, doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"); !s)
        return fail(s.error());
    }
    return sp.metrics.completed > 0 ? 0 : fail("no request succeeded");
  }

  std::vector<loadgen::SweepPoint> sweep;
  for (const auto& p : *points) {
    std::fprintf(stderr, "loadgen: run %s ...\n", p.label().c_str());
    loadgen::SweepPoint sp;
    sp.run = loadgen::run_load(co, model, *requests, p);
    sp.metrics = loadgen::compute_metrics(sp.run.outcomes, sp.run.duration_s, *pcts, slo);
    std::fprintf(stderr, "loadgen: %s: %lld ok, %lld failed, %.2f req/s, %.1f output tok/s, %.1f s\n",
                 p.label().c_str(), (long long)sp.metrics.completed, (long long)sp.metrics.failed,
                 sp.metrics.request_throughput, sp.metrics.output_throughput, sp.run.duration_s);
    for (const auto& o : sp.run.outcomes) {
      if (!o.success) {
        std::fprintf(stderr, "loadgen: first failure: %s\n", o.error.c_str());
        break;
      }
    }
    sweep.push_back(std::move(sp));
  }

  const std::string table = loadgen::markdown_table(sweep);
  std::fwrite(table.data(), 1, table.size(), stdout);
  if (!a.table_file.empty())
    if (auto s = write_text(a.table_file, table); !s) return fail(s.error());
  int knee = -1;
  nlohmann::ordered_json charts = nullptr;
  if (!a.svg_dir.empty()) {
    auto files = loadgen::write_charts(a.svg_dir, sweep, knee_metric, knee);
    if (!files) return fail(files.error());
    charts = {{"ttft_heatmap", files->ttft_heatmap}, {"tpot_heatmap", files->tpot_heatmap},
              {"throughput_curve", files->throughput_curve}};
    std::printf("\ncharts: %s %s %s\n", files->ttft_heatmap.c_str(), files->tpot_heatmap.c_str(),
                files->throughput_curve.c_str());
    if (knee >= 0) std::printf("knee (P99 %s): %s\n", loadgen::knee_metric_name(knee_metric), sweep[size_t(knee)].run.load.label().c_str());
  }
  if (!a.result_json.empty()) {
    nlohmann::ordered_json doc;
    doc["backend"] = "openai";
    doc["base_url"] = a.url;
    doc["endpoint"] = a.endpoint;
    doc["model_id"] = model;
    doc["dataset"] = a.dataset;
    doc["num_prompts"] = a.num_prompts;
    doc["input_len"] = wo.input_len.to_string();
    doc["output_len"] = wo.output_len.to_string();
    doc["ignore_eos"] = !a.no_ignore_eos;
    doc["percentiles"] = *pcts;
    doc["knee_metric"] = loadgen::knee_metric_name(knee_metric);
    doc["knee"] = knee >= 0 ? nlohmann::ordered_json(sweep[size_t(knee)].run.load.label()) : nlohmann::ordered_json(nullptr);
    doc["charts"] = charts;
    doc["runs"] = nlohmann::ordered_json::array();
    for (const auto& sp : sweep) doc["runs"].push_back(loadgen::run_json(sp, a.detailed));
    if (auto s = write_text(a.result_json, doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"); !s)
      return fail(s.error());
  }
  for (const auto& sp : sweep)
    if (sp.metrics.completed == 0) return fail("run " + sp.run.load.label() + ": no request succeeded");
  return 0;
}

}  // namespace

void register_loadgen(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<LoadgenArgs>();
  auto* cmd = app.add_subcommand("loadgen", "Load generator for OpenAI-compatible servers (vllm bench serve metrics)");
  cmd->add_option("--url", a->url, "Server base URL, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option("--endpoint", a->endpoint, "completions (token-id prompts, exact lengths) or chat");
  cmd->add_option("--model", a->model, "Model id (default: the first of /v1/models)");
  cmd->add_option("--api-key", a->api_key, "Bearer token");
  cmd->add_option("--concurrency", a->concurrency, "Closed-loop sweep: clients per run, e.g. 1,2,4,8,16");
  cmd->add_option("--rate", a->rate, "Open-loop sweep: requests/s per run, e.g. 1,2,4,inf");
  cmd->add_option("--burstiness", a->burstiness, "Gamma shape of arrival gaps (1: Poisson)")->check(CLI::PositiveNumber);
  cmd->add_option("--max-concurrency", a->max_concurrency, "Open loop: cap on requests in flight (0: none)");
  cmd->add_option("--num-prompts", a->num_prompts, "Requests per run")->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  cmd->add_option("--input-len", a->input_len, "Prompt tokens: N, LO:HI (uniform) or log:LO:HI");
  cmd->add_option("--output-len", a->output_len, "max_tokens: N, LO:HI or log:LO:HI");
  cmd->add_option("--dataset", a->dataset,
                  "random, shared-prefix, conversations (multi-turn: each turn's prompt is the last one, an answer "
                  "and a new message; a client sends a conversation's turns in order; closed loop) or jsonl");
  cmd->add_option("--turns", a->turns, "conversations: turns each (--num-prompts / --turns conversations)")
      ->check(CLI::Range(int64_t(1), int64_t(1000)));
  cmd->add_option("--prompt-file", a->prompt_file, "JSONL: {\"prompt\": ...} or {\"messages\": [...]}, optional output_len");
  cmd->add_option("--prefix-len", a->prefix_len, "shared-prefix: tokens of the shared prefix");
  cmd->add_option("--num-prefixes", a->num_prefixes, "shared-prefix: distinct prefixes")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_flag("--no-ignore-eos", a->no_ignore_eos, "Let the model stop at EOS (output lengths vary)");
  cmd->add_option("--temperature", a->temperature, "Sampling temperature");
  cmd->add_option("--seed", a->seed, "Workload and arrival seed");
  cmd->add_option("--percentiles", a->percentiles, "Percentiles to report, e.g. 50,90,99");
  cmd->add_option("--result-json", a->result_json, "Write the results as JSON (vllm bench serve names)");
  cmd->add_flag("--detailed", a->detailed, "Per-request arrays in the JSON (input_lens, ttfts, itls, ...)");
  cmd->add_option("--table", a->table_file, "Also write the Markdown table to this file");
  cmd->add_option("--svg-dir", a->svg_dir, "Write ttft_heatmap.svg, tpot_heatmap.svg, throughput_p99.svg here");
  cmd->add_option("--knee-metric", a->knee_metric, "Latency on the curve's y axis: ttft, tpot, itl or e2el (P99)");
  cmd->add_option("--warmup", a->warmup, "Requests sent before measuring");
  cmd->add_option("--timeout", a->timeout_s, "Per-request timeout in seconds");
  cmd->add_option("--tenant", a->tenants,
                  "A tenant NAME:RATE[:KEY] (repeat it): open loop at RATE req/s with its own API key; the requests "
                  "(--num-prompts) are split by rate and each tenant's latency and goodput reported");
  cmd->add_option("--slo-ttft-ms", a->slo_ttft_ms, "Goodput: a request counts when its TTFT is at most this (0: any)");
  cmd->add_option("--slo-tpot-ms", a->slo_tpot_ms, "Goodput: ... and its TPOT at most this (0: any)");
  cmd->callback([&handler, a] { handler = [a] { return run_loadgen(*a); }; });
}

}  // namespace kvasir::cli
