#include "server/server.h"

#include <thread>

#include "server/admission.h"
#include "server/http_util.h"
#include "server/routes.h"

namespace kvasir::server {

namespace {

http::TransportOptions transport_options(const ServerOptions& o) {
  http::TransportOptions t;
  t.limits.max_body_bytes = o.max_body_bytes;
  t.workers = size_t(o.http_threads > 0 ? o.http_threads : 256);
  t.max_connections = o.max_connections;
  return t;
}

AccessOptions access_options(const ServerOptions& o) {
  AccessOptions a = o.access;
  a.listen_host = o.host;
  return a;
}

}  // namespace

void register_routes(http::Router& router, ServerState& state, const AccessPolicy& access) {
  router.set_admission(make_admission(access));
  register_info_routes(router, state);
  register_ollama_routes(router, state);
  register_lora_routes(router, state);
  register_ollama_model_routes(router, state);
  register_llamacpp_routes(router, state);
  register_responses_routes(router, state);
  register_generation_routes(router, state);
  register_embedding_routes(router, state);
  register_disagg_routes(router, state);
}

HttpServer::HttpServer(ServerOptions options)
    : state_(std::move(options)),
      access_(access_options(state_.options)),
      transport_(std::make_unique<http::Transport>(transport_options(state_.options), router_)) {
  register_routes(router_, state_, access_);
  router_.set_finisher([this](const http::Request& req, http::Response& res) {
    access_.decorate(req, res);
    // A caller's request id comes back on its response, so it can match logs on both sides.
    if (const std::string& id = req.header("X-Request-Id"); !id.empty() && id.size() <= 256)
      res.headers.set("X-Request-Id", id);
    if (res.status >= 400) state_.metrics.count_http_error(res.status);
  });
  const size_t max_body = state_.options.max_body_bytes;
  router_.set_error_builder([max_body](int status, const std::string& message, const std::string& code,
                                       std::string_view path) {
    ApiError e{.status = status, .message = message, .code = code};
    if (status == 413) e.message = "the request body exceeds the limit of " + std::to_string(max_body) + " bytes";
    if (status >= 500) e.type = "server_error";
    if (path.starts_with("/api/")) {  // Ollama's routes and clients: {"error": "..."}
      http::Response res;
      res.status = status;
      res.set_content(ordered_json{{"error", e.message}}.dump() + "\n", "application/json");
      return res;
    }
    return error_response(e);
  });
  state_.http_gauges = [this] {
    const http::TransportStats t = transport_->stats();
    return HttpGauges{.connections_open = t.connections_open,
                      .connections_refused = t.connections_refused,
                      .requests_in_flight = t.requests_in_flight};
  };
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() { return transport_->bind(state_.options.host, state_.options.port); }

void HttpServer::start() { transport_->start(); }

void HttpServer::drain_and_stop(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  const Phase before = state_.phase();
  state_.set_phase(Phase::draining);
  Backend* b = before == Phase::ready ? state_.backend() : nullptr;
  if (b && b->engine && !b->engine->drain(deadline)) b->engine->abort_all();
  // Responses still being written (the final chunks of aborted streams among them): the rest of
  // the time, and a moment more for the aborted ones to say goodbye.
  const auto write_deadline = std::max(deadline, Clock::now() + std::chrono::milliseconds(500));
  while (state_.active_generations.load() > 0 && Clock::now() < write_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop();
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  // Handlers still waiting on the engine see their clients gone and return; the engine goes last.
  if (Backend* b = state_.backend(); b && b->engine) b->engine->abort_all();
  transport_->stop();
  state_.detach();  // the engine (if any) aborts what is left and joins its loop
}

}  // namespace kvasir::server
