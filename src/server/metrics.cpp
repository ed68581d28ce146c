#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace kvasir::server {

namespace {

// Upper bounds in seconds. Finer at the low end than vLLM's, since a CPU engine on a small model
// answers in milliseconds.
const std::vector<double> kTtftBounds = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75,  1.0,    2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
const std::vector<double> kTokenBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                          0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestBounds = {0.01, 0.025, 0.05, 0.1,  0.3,  0.5,  0.8,   1.0,   1.5,   2.0,   2.5,  5.0,
                                            10.0, 15.0,  20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                                            7680.0};

std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string length_class(int64_t n, std::initializer_list<int64_t> uppers) {
  if (n <= 0) return "0";
  int64_t lower = 1;
  for (int64_t u : uppers) {
    if (n <= u) return std::to_string(lower) + "-" + std::to_string(u);
    lower = u + 1;
  }
  return std::to_string(lower) + "+";
}

// vLLM's buckets for token counts per request.
const std::vector<double> kTokenCountBounds = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

class Writer {
 public:
  explicit Writer(std::string labels) : base_(std::move(labels)) {}
  std::string out;

  void header(const std::string& name, const char* type, const char* help) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& extra, double value) {
    out += name + "{" + base_ + (extra.empty() ? "" : "," + extra) + "} " + num(value) + "\n";
  }
  void scalar(const std::string& name, const char* type, const char* help, double value) {
    header(name, type, help);
    sample(name, "", value);
  }
  void histogram(const std::string& name, const std::string& extra, const Histogram& h) {
    uint64_t cum = 0;
    const std::string pre = extra.empty() ? "" : extra + ",";
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      cum += h.counts()[i];
      sample(name + "_bucket", pre + "le=\"" + num(h.bounds()[i]) + "\"", double(cum));
    }
    sample(name + "_bucket", pre + "le=\"+Inf\"", double(h.count()));
    sample(name + "_sum", extra, h.sum());
    sample(name + "_count", extra, double(h.count()));
  }

 private:
  std::string base_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string input_length_class(int64_t n) { return length_class(n, {512, 2048, 8192}); }
std::string output_length_class(int64_t n) { return length_class(n, {128, 1024}); }

Metrics::Latencies::Latencies()
    : ttft(kTtftBounds), itl(kTokenBounds), e2e(kRequestBounds), queue(kRequestBounds), tpot(kTokenBounds) {}

Metrics::Metrics(std::string model_name, std::string prefix)
    : model_name_(std::move(model_name)),
      prefix_(std::move(prefix)),
      prompt_tokens_(kTokenCountBounds),
      generation_tokens_(kTokenCountBounds) {}

void Metrics::observe(const RequestRecord& r) {
  std::lock_guard lock(mutex_);
  prompt_tokens_.observe(double(r.prompt_tokens));
  generation_tokens_.observe(double(r.completion_tokens));
  Latencies& cell = by_length_[{input_length_class(r.prompt_tokens), output_length_class(r.completion_tokens)}];
  for (Latencies* l : {&all_, &cell}) {
    if (r.ttft_s >= 0) l->ttft.observe(r.ttft_s);
    if (r.e2e_s >= 0) l->e2e.observe(r.e2e_s);
    if (r.queue_s >= 0) l->queue.observe(r.queue_s);
    if (r.tpot_s >= 0) l->tpot.observe(r.tpot_s);
    for (double g : r.itl_s) l->itl.observe(g);
  }
  ++finished_[r.finish_reason.empty() ? "unknown" : r.finish_reason];
  // A request the client gave up on says nothing about the SLO.
  if (r.finish_reason == "abort") return;
  const bool ttft_ok = r.ttft_deadline_s <= 0 || (r.ttft_s >= 0 && r.ttft_s <= r.ttft_deadline_s);
  const bool tpot_ok = tpot_slo_s_ <= 0 || r.tpot_s < 0 || r.tpot_s <= tpot_slo_s_;
  SloCounts& c = slo_cell(r.service_class, r.tenant);
  ++(ttft_ok && tpot_ok ? c.met : c.missed);
}

Metrics::SloCounts& Metrics::slo_cell(const std::string& service_class, const std::string& tenant) {
  std::string label = tenant.empty() ? "default" : tenant;
  size_t tenants = 0;
  for (const auto& [key, counts] : slo_) tenants += key.first == service_class ? 1 : 0;
  if (!slo_.count({service_class, label}) && tenants >= kMaxTenantLabels) label = "other";
  return slo_[{service_class, label}];
}

void Metrics::record_refused(const std::string& service_class, const std::string& tenant) {
  std::lock_guard lock(mutex_);
  ++slo_cell(service_class, tenant).refused;
}

void Metrics::set_tpot_slo(double seconds) {
  std::lock_guard lock(mutex_);
  tpot_slo_s_ = seconds;
}

void Metrics::count_http_error(int status) {
  std::lock_guard lock(mutex_);
  ++http_errors_[status];
}

std::string Metrics::render(const EngineGauges* g, const HttpGauges* http) const {
  Writer w("model_name=\"" + escape_label(model_name_) + "\"");
  w.scalar("kvasir:model_loaded", "gauge", "1 once the model is loaded and requests are served.", g ? 1 : 0);
  if (http) {
    w.scalar("kvasir:http_connections", "gauge", "Open HTTP connections, idle ones included.",
             double(http->connections_open));
    w.scalar("kvasir:http_requests_in_flight", "gauge", "HTTP requests being handled or waiting for a worker.",
             double(http->requests_in_flight));
    w.scalar("kvasir:http_connections_refused_total", "counter", "Connections closed at once: over --max-connections.",
             double(http->connections_refused));
  }
  if (g) {
    w.scalar("kvasir:num_requests_running", "gauge", "Requests in the running batch.", double(g->num_running));
    w.scalar("kvasir:num_requests_waiting", "gauge", "Requests waiting to be scheduled.", double(g->num_waiting));
    const double usage = g->kv_blocks_total ? double(g->kv_blocks_used) / double(g->kv_blocks_total) : 0.0;
    w.scalar("kvasir:kv_cache_usage_perc", "gauge", "KV-cache usage as a fraction: 1 means 100 percent.", usage);
    w.scalar("kvasir:kv_cache_blocks_total", "gauge", "KV-cache blocks in the pool.", double(g->kv_blocks_total));
    w.scalar("kvasir:kv_cache_blocks_used", "gauge",
             "KV-cache blocks referenced by requests or KV transfers (cached, unreferenced ones are free).",
             double(g->kv_blocks_used));
    if (const auto& c = g->push) {
      w.scalar("kvasir:kv_push_done_total", "counter", "Prompts whose KV was sent to a decode instance.", double(c->done));
      w.scalar("kvasir:kv_push_failed_total", "counter", "KV pushes that failed (prefill or transfer).", double(c->failed));
      w.scalar("kvasir:kv_push_blocks_total", "counter", "KV blocks sent.", double(c->blocks));
      w.scalar("kvasir:kv_push_bytes_total", "counter", "KV bytes sent.", double(c->bytes));
      w.scalar("kvasir:kv_push_transfer_seconds_total", "counter", "Time spent sending KV (mostly while the prefills ran).",
               c->transfer_ms / 1e3);
      w.scalar("kvasir:kv_push_tail_seconds_total", "counter", "Time spent sending KV after the prefills had ended.",
               c->tail_ms / 1e3);
      w.scalar("kvasir:kv_push_prefill_seconds_total", "counter", "Time spent on the prefills whose KV was sent.",
               c->prefill_ms / 1e3);
    }
    if (const auto& c = g->pull) {
      w.scalar("kvasir:kv_pull_done_total", "counter", "Prompts whose KV came from a prefill instance.", double(c->done));
      w.scalar("kvasir:kv_pull_failed_total", "counter", "KV pulls that failed (then computed here).", double(c->failed));
      w.scalar("kvasir:kv_pull_expired_total", "counter", "KV pulls that missed --kv-transfer-timeout (then computed here).",
               double(c->expired));
      w.scalar("kvasir:kv_pull_skipped_total", "counter", "Prompts too short to pull, or already cached here.",
               double(c->skipped));
      w.scalar("kvasir:kv_pull_blocks_total", "counter", "KV blocks received.", double(c->blocks));
      w.scalar("kvasir:kv_pull_bytes_total", "counter", "KV bytes received.", double(c->bytes));
      w.scalar("kvasir:kv_transfer_rejected_frames_total", "counter", "KV frames refused (malformed, unknown, mismatched).",
               double(c->rejected_frames));
    }
    w.scalar("kvasir:kv_cache_quantized_layers", "gauge", "Layers whose KV cache is quantized (Q8_0 / Q4_0).",
             double(g->kv_quantized_layers));
    if (g->kv_guard_kld >= 0)
      w.scalar("kvasir:kv_guard_kld", "gauge",
               "Mean KL divergence of the quantized KV cache against F16, measured by --kv-guard at start-up.",
               g->kv_guard_kld);
    w.scalar("kvasir:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
             double(g->prefix_query_tokens));
    w.scalar("kvasir:prefix_cache_hits_total", "counter", "Prompt tokens served by the prefix cache.",
             double(g->prefix_hit_tokens));
    w.scalar("kvasir:prompt_tokens_total", "counter", "Prefill tokens computed.", double(g->prompt_tokens_total));
    w.scalar("kvasir:generation_tokens_total", "counter", "Tokens generated.", double(g->generation_tokens_total));
    if (!g->kv_tiers.empty()) {  // the prefix cache's stores beyond memory (--kv-disk, --kv-store)
      auto family = [&](const char* name, const char* type, const char* help, auto value) {
        w.header(name, type, help);
        for (const auto& t : g->kv_tiers) w.sample(name, "tier=\"" + t.tier + "\"", double(value(t)));
      };
      using T = EngineGauges::KvTier;
      family("kvasir:kv_tier_loaded_blocks_total", "counter", "KV blocks read back from a tier instead of recomputed.",
             [](const T& t) { return t.loaded_blocks; });
      family("kvasir:kv_tier_misses_total", "counter", "Tier lookups that found no usable block.", [](const T& t) { return t.misses; });
      family("kvasir:kv_tier_corrupt_total", "counter", "Stored blocks refused (torn, corrupted, foreign).",
             [](const T& t) { return t.corrupt; });
      family("kvasir:kv_tier_written_blocks_total", "counter", "KV blocks written to a tier.", [](const T& t) { return t.writes; });
      family("kvasir:kv_tier_write_errors_total", "counter", "Tier writes that failed (disk full, store down).",
             [](const T& t) { return t.write_errors; });
      family("kvasir:kv_tier_dropped_blocks_total", "counter", "Blocks not written: the queue was full or the store down.",
             [](const T& t) { return t.dropped; });
      family("kvasir:kv_tier_evictions_total", "counter", "Blocks a tier removed to keep within its bound.",
             [](const T& t) { return t.evictions; });
      family("kvasir:kv_tier_read_bytes_total", "counter", "Bytes read from a tier.", [](const T& t) { return t.bytes_read; });
      family("kvasir:kv_tier_written_bytes_total", "counter", "Bytes written to a tier.", [](const T& t) { return t.bytes_written; });
      family("kvasir:kv_tier_stored_bytes", "gauge", "Bytes a tier holds (the disk tier; 0 where the store keeps count itself).",
             [](const T& t) { return t.bytes_stored; });
      w.scalar("kvasir:kv_tier_loads_total", "counter", "Requests whose prompt got KV blocks from a tier.", double(g->kv_tier_loads));
      w.scalar("kvasir:kv_tier_load_seconds_total", "counter", "Time spent reading, checking and importing stored blocks.",
               g->kv_tier_load_seconds);
      w.scalar("kvasir:kv_tier_saved_blocks_total", "counter", "KV blocks queued for the tiers.", double(g->kv_tier_saved_blocks));
    }
    if (!g->iteration_tokens.empty() && g->iteration_tokens.size() == g->iteration_token_bounds.size() + 1) {  // vLLM's iteration_tokens_total: rows per engine step
      const std::string name = "kvasir:iteration_tokens_total";
      w.header(name, "histogram", "Tokens (prompt and generated rows) per engine step.");
      int64_t cum = 0;
      for (size_t i = 0; i < g->iteration_tokens.size(); ++i) {
        cum += g->iteration_tokens[i];
        const bool last = i + 1 == g->iteration_tokens.size();
        w.sample(name + "_bucket", "le=\"" + (last ? std::string("+Inf") : num(double(g->iteration_token_bounds[i]))) + "\"",
                 double(cum));
      }
      w.sample(name + "_sum", "", double(g->iteration_tokens_sum));
      w.sample(name + "_count", "", double(cum));
    }
    w.scalar("kvasir:num_preemptions_total", "counter", "Requests preempted to free KV blocks.",
             double(g->num_preemptions));
    w.scalar("kvasir:num_yields_total", "counter",
             "Running requests preempted to give their seat or KV to a better class or priority.", double(g->num_yields));
    w.scalar("kvasir:prefill_held_steps_total", "counter",
             "Engine steps in which the TPOT target (--tpot-target) held prefill back.", double(g->num_prefill_held));
    w.scalar("kvasir:spec_decode_num_drafts_total", "counter", "Sequence steps verified with draft tokens.",
             double(g->spec_drafts));
    w.scalar("kvasir:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.",
             double(g->spec_draft_tokens));
    w.scalar("kvasir:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
             double(g->spec_accepted_tokens));
    // Acceptance at draft position j = accepted_per_pos / draft_tokens_per_pos (the controller
    // drafts fewer positions where they stop paying, so the two are counted separately).
    if (!g->spec_draft_tokens_at.empty()) {
      w.header("kvasir:spec_decode_num_draft_tokens_per_pos_total", "counter", "Draft tokens verified at each draft position.");
      for (size_t j = 0; j < g->spec_draft_tokens_at.size(); ++j)
        w.sample("kvasir:spec_decode_num_draft_tokens_per_pos_total", "position=\"" + std::to_string(j) + "\"",
                 double(g->spec_draft_tokens_at[j]));
      w.header("kvasir:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Draft tokens accepted at each draft position.");
      for (size_t j = 0; j < g->spec_accepted_tokens_at.size(); ++j)
        w.sample("kvasir:spec_decode_num_accepted_tokens_per_pos_total", "position=\"" + std::to_string(j) + "\"",
                 double(g->spec_accepted_tokens_at[j]));
    }
  }
  std::lock_guard lock(mutex_);
  w.header("kvasir:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort"}) {
    auto it = finished_.find(reason);
    w.sample("kvasir:request_success_total", std::string("finished_reason=\"") + reason + "\"",
             double(it == finished_.end() ? 0 : it->second));
  }
  if (!slo_.empty()) {
    w.header("kvasir:slo_requests_total", "counter",
             "Requests by service class and tenant: served within their SLO (TTFT deadline and --tpot-target), "
             "served late, or refused at admission (429). Goodput is the rate of result=\"met\".");
    for (const auto& [key, c] : slo_) {
      const std::string labels = "service_class=\"" + escape_label(key.first) + "\",tenant=\"" + escape_label(key.second) + "\",result=";
      w.sample("kvasir:slo_requests_total", labels + "\"met\"", double(c.met));
      w.sample("kvasir:slo_requests_total", labels + "\"missed\"", double(c.missed));
      w.sample("kvasir:slo_requests_total", labels + "\"refused\"", double(c.refused));
    }
  }
  if (!http_errors_.empty()) {
    w.header("kvasir:http_errors_total", "counter", "Requests answered with an error status.");
    for (const auto& [status, n] : http_errors_) w.sample("kvasir:http_errors_total", "status=\"" + std::to_string(status) + "\"", double(n));
  }
  struct Family {
    const char* name;
    const char* help;
    Histogram Latencies::*member;
  };
  const Family families[] = {
      {"time_to_first_token_seconds", "Time to first token (arrival to first generated token).", &Latencies::ttft},
      {"inter_token_latency_seconds", "Time between consecutive output tokens.", &Latencies::itl},
      {"e2e_request_latency_seconds", "Arrival to last token.", &Latencies::e2e},
      {"request_queue_time_seconds", "Arrival to first scheduling.", &Latencies::queue},
      {"request_time_per_output_token_seconds", "Mean time per output token after the first, per request.",
       &Latencies::tpot},
      // vLLM's older name for the gaps between output tokens (its dashboards still plot it).
      {"time_per_output_token_seconds", "Time between consecutive output tokens (as inter_token_latency_seconds).",
       &Latencies::itl},
  };
  for (const Family& f : families) {
    const std::string name = std::string("kvasir:") + f.name;
    w.header(name, "histogram", f.help);
    w.histogram(name, "", all_.*f.member);
  }
  w.header("kvasir:request_prompt_tokens", "histogram", "Prompt tokens per finished request.");
  w.histogram("kvasir:request_prompt_tokens", "", prompt_tokens_);
  w.header("kvasir:request_generation_tokens", "histogram", "Generated tokens per finished request.");
  w.histogram("kvasir:request_generation_tokens", "", generation_tokens_);
  // By length class: the latencies an SLO is set on (TTFT, TPOT), in a fixed number of series.
  for (const Family& f : {families[0], families[4]}) {
    // kvasir:time_to_first_token_seconds -> kvasir:time_to_first_token_by_length_seconds
    std::string base = f.name;
    base.erase(base.size() - std::string("_seconds").size());
    const std::string name = "kvasir:" + base + "_by_length_seconds";
    w.header(name, "histogram", (std::string(f.help) + " By input and output length class.").c_str());
    for (const auto& [key, cell] : by_length_) {
      const Histogram& h = cell.*f.member;
      if (!h.count()) continue;
      w.histogram(name, "input_len=\"" + key.first + "\",output_len=\"" + key.second + "\"", h);
    }
  }
  if (prefix_ == "kvasir:") return std::move(w.out);
  // Another prefix (vLLM's): every family name, in its samples and its HELP and TYPE lines.
  std::string out;
  out.reserve(w.out.size());
  for (size_t at = 0; at < w.out.size();) {
    const size_t nl = w.out.find('\n', at);
    std::string_view line(w.out.data() + at, (nl == std::string::npos ? w.out.size() : nl + 1) - at);
    at += line.size();
    for (std::string_view lead : {"", "# HELP ", "# TYPE "})
      if (line.starts_with(std::string(lead) + "kvasir:")) {
        out += lead;
        out += prefix_;
        line.remove_prefix(lead.size() + 7);
        break;
      }
    out += line;
  }
  return out;
}

}  // namespace kvasir::server
