#include "server/server.h"

#include <algorithm>

#include <httplib.h>

#include "server/http_util.h"
#include "server/routes.h"

namespace kvasir::server {

namespace {

// cpp-httplib answers some failures itself (unknown path, body too large, bad request line) with
// an empty body; give those the same JSON error shape as ours.
ApiError error_for_status(int status, const httplib::Request& req, size_t max_body) {
  switch (status) {
    case 404:
      return ApiError{.status = 404, .message = "no route for " + req.method + " " + req.path, .code = "not_found"};
    case 405: return ApiError{.status = 405, .message = "method not allowed", .code = "method_not_allowed"};
    case 413:
      return ApiError{.status = 413,
                      .message = "the request body exceeds the limit of " + std::to_string(max_body) + " bytes",
                      .code = "request_too_large"};
    case 414: return ApiError{.status = 414, .message = "the request URI is too long"};
    default: break;
  }
  if (status >= 500) return ApiError{.status = status, .message = "internal server error", .type = "server_error"};
  return ApiError{.status = status, .message = "bad request"};
}

}  // namespace

HttpServer::HttpServer(ServerOptions options) : state_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  configure();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::configure() {
  const ServerOptions& o = state_.options;
  // Each streaming response holds a worker thread for its whole life.
  const size_t threads = size_t(o.http_threads > 0 ? o.http_threads : 256);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(o.max_body_bytes);
  http_->set_keep_alive_timeout(5);
  http_->set_read_timeout(30);
  http_->set_write_timeout(30);

  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (needs_auth(req.path) && !authorized(req, state_.options.api_key)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res,
                 ApiError{.status = 401,
                          .message = "missing or incorrect API key: send 'Authorization: Bearer <key>'",
                          .code = "invalid_api_key"},
                 &state_.metrics);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // ours already
    ApiError e = error_for_status(res.status, req, state_.options.max_body_bytes);
    send_error(res, e, &state_.metrics);
  });
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError{.status = 500, .message = "internal server error", .type = "server_error"},
               &state_.metrics);
  });
  register_info_routes(*http_, state_);
  register_generation_routes(*http_, state_);
}

Status HttpServer::bind() {
  const ServerOptions& o = state_.options;
  if (o.port == 0) {
    port_ = http_->bind_to_any_port(o.host);
    if (port_ <= 0) return Error{"cannot bind to " + o.host + " (any port)"};
  } else {
    if (!http_->bind_to_port(o.host, o.port)) return Error{"cannot bind to " + o.host + ":" + std::to_string(o.port)};
    port_ = o.port;
  }
  return Status{};
}

void HttpServer::start() {
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

void HttpServer::drain_and_stop(std::chrono::milliseconds timeout) {
  const Phase before = state_.phase();
  state_.set_phase(Phase::draining);
  if (before == Phase::ready) {
    if (Backend* b = state_.backend(); b && b->engine) b->engine->drain();
  }
  // Responses still being written after the engine finished: give them the rest of the time.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (state_.active_generations.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop();
}

void HttpServer::stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
  state_.detach();  // the engine (if any) aborts what is left and joins its loop
}

}  // namespace kvasir::server
