#include "router/router_server.h"

#include <set>
#include <sstream>

#include "router/relay.h"
#include "server/admission.h"
#include "server/http_util.h"

namespace kvasir::router {
namespace {

using server::ApiError;
using server::ordered_json;

constexpr size_t kAffinityBytes = 2048;

// The text a request's prompt starts with: the first two messages of a conversation (its system
// prompt and first turn, which every later turn repeats), else the prompt or input's beginning.
std::string prompt_prefix(const ordered_json& body) {
  auto head = [](const ordered_json& v) {
    if (v.is_string()) return v.get<std::string>().substr(0, kAffinityBytes);
    if (v.is_array()) {
      ordered_json first = ordered_json::array();
      for (size_t i = 0; i < v.size() && i < 2; ++i) first.push_back(v[i]);
      return first.dump().substr(0, kAffinityBytes);
    }
    return std::string();
  };
  for (const char* field : {"messages", "prompt", "input"})
    if (body.contains(field)) return head(body[field]);
  return {};
}

std::string error_event(const std::string& message) {
  const ordered_json e{{"error", {{"message", message}, {"type", "server_error"}, {"code", "instance_failed"}}}};
  return "data: " + e.dump() + "\n\n";
}

http::TransportOptions transport_options(const RouterOptions& o) {
  http::TransportOptions t;
  t.limits.max_body_bytes = o.max_body_bytes;
  return t;
}

server::AccessOptions access_options(const RouterOptions& o) {
  server::AccessOptions a = o.access;
  a.listen_host = o.host;
  return a;
}

}  // namespace

RouterServer::RouterServer(RouterOptions options)
    : options_(std::move(options)),
      access_(access_options(options_)),
      pool_(options_.instances, PoolOptions{.health_interval = options_.health_interval,
                                             .api_key = options_.upstream_api_key.empty() && !options_.access.api_keys.empty()
                                                            ? options_.access.api_keys[0]
                                                            : options_.upstream_api_key,
                                             .affinity_slack = options_.affinity_slack,
                                             .pooled_affinity_slack = options_.pooled_affinity_slack}) {
  router_.set_admission(server::make_admission(access_));
  router_.set_finisher([this](const http::Request& req, http::Response& res) { access_.decorate(req, res); });
  router_.set_error_builder([](int status, const std::string& message, const std::string& code, std::string_view) {
    return server::error_response(ApiError{.status = status, .message = message,
                                           .type = status >= 500 ? "server_error" : "invalid_request_error", .code = code});
  });
  const http::RouteOptions open{.run = http::Run::io_thread, .auth = http::Auth::open};
  const http::RouteOptions quick{.run = http::Run::io_thread};
  const http::RouteOptions post{.run = http::Run::worker, .json_body = true};
  router_.add("GET", "/health", [this](const http::Request&, http::Response& res) {
    if (pool_.ready()) return server::send_json(res, 200, ordered_json{{"status", "ok"}});
    server::send_error(res, ApiError{.status = 503, .message = "no healthy instance", .type = "server_error",
                                     .code = "no_instance"});
  }, open);
  router_.add("GET", "/v1/models", [this](const http::Request&, http::Response& res) { models(res); }, quick);
  router_.add("GET", "/metrics", [this](const http::Request&, http::Response& res) { metrics(res); },
              options_.access.metrics_public ? open : quick);
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/tokenize",
                           "/detokenize"})
    router_.add("POST", path, [this](const http::Request& req, http::Response& res) { relay(req, res); }, post);
  transport_ = std::make_unique<http::Transport>(transport_options(options_), router_);
}

RouterServer::~RouterServer() { stop(); }

Status RouterServer::bind() { return transport_->bind(options_.host, options_.port); }

void RouterServer::start() {
  pool_.start();
  transport_->start();
}

void RouterServer::stop() { transport_->stop(std::chrono::milliseconds(2000)); }

void RouterServer::relay(const http::Request& req, http::Response& res) {
  ++counters_.requests;
  const ordered_json& body = server::json_body(req).doc;
  const std::string model = body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>() : "";
  std::string route_model = model;
  if (!model.empty() && !pool_.known_model(model)) {
    const std::vector<std::string> served = pool_.models();
    if (served.size() > 1 || (served.size() == 1 && served[0] != model)) {
      std::string list;
      for (const auto& m : served) list += (list.empty() ? "`" : ", `") + m + "`";
      return server::send_error(res, ApiError{.status = 404,
                                              .message = "The model `" + model + "` does not exist; served here: " + list + ".",
                                              .param = "model", .code = "model_not_found"});
    }
    route_model.clear();  // not known yet (no health answer): any instance
  }
  const std::string prefix = prompt_prefix(body);
  const uint64_t key = prefix.empty() ? 0 : affinity_key(prefix);

  std::vector<std::pair<std::string, std::string>> headers{{"Content-Type", "application/json"}};
  if (!options_.upstream_api_key.empty()) headers.emplace_back("Authorization", "Bearer " + options_.upstream_api_key);
  else if (const std::string& auth = req.header("Authorization"); !auth.empty()) headers.emplace_back("Authorization", auth);
  for (const char* h : {"Accept", "X-Request-Id"})
    if (const std::string& v = req.header(h); !v.empty()) headers.emplace_back(h, v);

  std::set<int> tried;
  std::string last_error = "no healthy instance serves this model";
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    const int i = pool_.pick(route_model, false, key, tried);
    if (i < 0) break;
    tried.insert(i);
    if (attempt > 0) ++counters_.replaced;
    UpstreamRequest up{.url = pool_.url(i), .path = req.target, .body = req.body, .headers = headers,
                       .read_timeout = options_.upstream_timeout};
    int prefill = -1;
    if (pool_.role(i) == Role::decode && (prefill = pool_.pick("", true, key, {})) >= 0) {
      up.headers.emplace_back("X-Kvasir-Prefill", pool_.url(prefill));
      ++counters_.with_prefill;
      pool_.begin(prefill);  // its load, as far as the router knows: the requests that may use it
    }
    pool_.begin(i);
    auto relay = Relay::start(std::move(up), [this, i, prefill](bool failed) {
      pool_.end(i, failed);
      if (prefill >= 0) pool_.end(prefill, false);
    });
    if (!relay->wait_headers()) {
      last_error = pool_.url(i) + " did not answer: " + relay->error();
      continue;
    }
    if (relay->status() == 503) {  // loading or draining: another instance may take it
      relay->cancel();
      last_error = pool_.url(i) + " is unavailable";
      continue;
    }
    res.status = relay->status();
    const std::string type = relay->content_type().empty() ? "application/json" : relay->content_type();
    if (type.rfind("text/event-stream", 0) == 0) {
      res.content_type = type;
      res.headers.set("Cache-Control", "no-cache");
      auto gone = req.gone;
      res.stream = [this, relay, gone](http::StreamSink& sink) {
        std::string piece;
        for (;;) switch (relay->next(piece, std::chrono::milliseconds(200))) {
            case Relay::Next::piece:
              if (!sink.write(piece)) {
                relay->cancel();
                return false;
              }
              return true;
            case Relay::Next::waiting:
              if (gone->load()) {
                relay->cancel();
                return false;
              }
              continue;
            case Relay::Next::end:
              if (relay->failed()) {
                ++counters_.broken_streams;
                sink.write(error_event("the instance serving this stream failed: " + relay->error()));
              }
              return false;
          }
      };
      res.on_close = [relay](bool) { relay->cancel(); };
      return;
    }
    // A whole answer: collected, so that an instance failing half-way can be replaced unseen.
    std::string content, piece;
    for (bool done = false; !done;) switch (relay->next(piece, std::chrono::milliseconds(200))) {
        case Relay::Next::piece: content += piece; break;
        case Relay::Next::waiting:
          if (req.client_gone()) {
            relay->cancel();
            return;
          }
          break;
        case Relay::Next::end: done = true; break;
      }
    if (relay->failed()) {
      last_error = pool_.url(i) + " failed while answering: " + relay->error();
      continue;
    }
    res.set_content(std::move(content), type);
    return;
  }
  ++counters_.unplaceable;
  server::send_error(res, ApiError{.status = 503, .message = "no instance could serve the request: " + last_error,
                                   .type = "server_error", .code = "no_instance"});
}

void RouterServer::models(http::Response& res) const {
  ordered_json data = ordered_json::array();
  for (const auto& m : pool_.models())
    data.push_back(ordered_json{{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "kvasir"}});
  server::send_json(res, 200, ordered_json{{"object", "list"}, {"data", data}});
}

void RouterServer::metrics(http::Response& res) const {
  std::ostringstream o;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << v << "\n";
  };
  counter("kvasir_router_requests_total", "Requests the router took", counters_.requests);
  counter("kvasir_router_replaced_total", "Placements after an instance failed or was unavailable", counters_.replaced);
  counter("kvasir_router_unplaceable_total", "Requests no instance could serve (503)", counters_.unplaceable);
  counter("kvasir_router_broken_streams_total", "Streams ended by their instance failing mid-way", counters_.broken_streams);
  counter("kvasir_router_prefill_assigned_total", "Requests sent to a decode instance with a prefill instance named",
          counters_.with_prefill);
  const PlacementCounts placed = pool_.placements();
  o << "# HELP kvasir_router_placements_total Requests with a prompt, by where placement sent them: the instance "
       "its prefix is affine to, or a less busy one that shares its KV pool or does not\n"
       "# TYPE kvasir_router_placements_total counter\n"
    << "kvasir_router_placements_total{reason=\"affine\"} " << placed.affine << "\n"
    << "kvasir_router_placements_total{reason=\"balanced_pooled\"} " << placed.balanced_pooled << "\n"
    << "kvasir_router_placements_total{reason=\"balanced\"} " << placed.balanced << "\n";
  const auto instances = pool_.view();
  auto per_instance = [&](const char* name, const char* help, const char* type, auto get) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (const auto& v : instances)
      o << name << "{instance=\"" << v.url << "\",role=\"" << role_name(v.role) << "\"} " << get(v) << "\n";
  };
  per_instance("kvasir_router_instance_healthy", "1 when the instance's last health check passed", "gauge",
               [](const InstanceView& v) { return int(v.healthy); });
  per_instance("kvasir_router_instance_in_flight", "Requests the router is relaying to the instance", "gauge",
               [](const InstanceView& v) { return v.in_flight; });
  per_instance("kvasir_router_instance_requests_total", "Requests placed on the instance", "counter",
               [](const InstanceView& v) { return v.requests; });
  per_instance("kvasir_router_instance_failures_total", "Requests the instance failed to answer", "counter",
               [](const InstanceView& v) { return v.failures; });
  res.set_content(o.str(), "text/plain; version=0.0.4");
}

}  // namespace kvasir::router
