#include "server/admission.h"

#include <malloc.h>

#include <memory>

#include "server/http_util.h"
#include "server/responses.h"

namespace kvasir::server {

namespace {

using BodyPtr = std::shared_ptr<ordered_json>;

// Keeps the error's status and headers (WWW-Authenticate) but gives Ollama's routes their shape.
bool reshape(const http::Request& req, http::Response& res) {
  if (!ollama_path(req.path) || res.status < 400) return true;
  const ordered_json body = ordered_json::parse(res.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object() && body["error"].contains("message"))
    res.set_content(dump_json(ordered_json{{"error", body["error"]["message"]}}), "application/json");
  return true;
}

}  // namespace

bool ollama_path(const std::string& path) { return path.rfind("/api/", 0) == 0; }

http::Response route_error(const http::Request& req, const ApiError& error) {
  if (!ollama_path(req.path)) return error_response(error);
  http::Response res;
  res.status = error.status;
  res.set_content(dump_json(ordered_json{{"error", error.message}}), "application/json");
  return res;
}

http::Router::Admission make_admission(const AccessPolicy& access) {
  http::Router::Admission a;
  a.screen = [&access](http::Request& req, http::Response& res) {
    return access.screen(req, res) && reshape(req, res);
  };
  a.authenticate = [&access](http::Request& req, http::Response& res) {
    return access.authenticate(req, res) && reshape(req, res);
  };
  a.body = [](http::Request& req, http::Response& res) {
    auto doc = parse_json_object(req.body);
    if (!doc) {
      res = route_error(req, doc.error());
      return true;
    }
    req.parsed = std::make_shared<ordered_json>(std::move(*doc));
    return false;
  };
  a.done = [](const http::Request& req) {
    // Parsing a large body scatters its nodes over this worker's malloc arena; freed, they stay
    // resident (250 MB per thread after a 7.8 MB body) unless handed back.
    if (req.body.size() >= kTrimAfterBodyBytes) malloc_trim(0);
  };
  return a;
}

JsonBody json_body(const http::Request& req) {
  if (const BodyPtr* p = std::any_cast<BodyPtr>(&req.parsed); p && *p) return JsonBody{std::move(**p)};
  auto doc = parse_json_object(req.body);
  return JsonBody{doc ? std::move(*doc) : ordered_json()};
}

}  // namespace kvasir::server
