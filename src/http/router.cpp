#include "http/router.h"

namespace kvasir::http {

namespace {

// "application/json; charset=utf-8" -> "application/json"
std::string media_type(const std::string& content_type) {
  std::string m = content_type.substr(0, content_type.find(';'));
  while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.pop_back();
  size_t start = 0;
  while (start < m.size() && (m[start] == ' ' || m[start] == '\t')) ++start;
  return m.substr(start);
}

}  // namespace

void Router::add(const std::string& method, const std::string& path, Handler handler, RouteOptions options) {
  routes_[path][method] = Route{std::move(handler), options};
}

std::string Router::allowed_methods(const std::string& path) const {
  auto it = routes_.find(path);
  if (it == routes_.end()) return {};
  std::string out;
  for (const auto& [method, route] : it->second) {
    out += (out.empty() ? "" : ", ") + method;
    if (method == "GET" && !it->second.count("HEAD")) out += ", HEAD";
  }
  return out;
}

std::vector<RouteInfo> Router::routes() const {
  std::vector<RouteInfo> out;
  for (const auto& [path, methods] : routes_)
    for (const auto& [method, route] : methods) out.push_back(RouteInfo{method, path, route.options});
  return out;
}

const Router::Route* Router::find(const Request& req) const {
  auto p = routes_.find(req.path);
  if (p == routes_.end()) return nullptr;
  auto m = p->second.find(req.method);
  // HEAD is GET without the body (finish() drops it).
  if (m == p->second.end() && req.method == "HEAD") m = p->second.find("GET");
  return m == p->second.end() ? nullptr : &m->second;
}

void Router::finish(const Request& req, Response& res) const {
  if (req.method == "HEAD") {
    res.body.clear();
    res.stream = nullptr;
  }
  if (finisher_) finisher_(req, res);
}

void Router::run(const Route& route, Request& req, Response& res) const {
  if (route.options.json_body && admission_.body && admission_.body(req, res)) return;
  route.handler(req, res);
}

bool Router::handle_inline(Request& req, Response& res) {
  if (admission_.screen && admission_.screen(req, res)) return finish(req, res), true;
  const Route* route = find(req);
  // Unknown paths are authenticated too: without a key, nothing about the routes is revealed.
  if ((!route || route->options.auth != Auth::open) && admission_.authenticate && admission_.authenticate(req, res))
    return finish(req, res), true;
  if (!route) {
    const std::string allow = allowed_methods(req.path);
    if (allow.empty()) {
      res = error_at(req.path, 404, "no route for " + req.method + " " + req.path, "not_found");
    } else {
      res = error_at(req.path, 405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")",
                  "method_not_allowed");
      res.headers.set("Allow", allow);
    }
    return finish(req, res), true;
  }
  if (route->options.json_body && req.headers.has("Content-Type")) {
    const std::string type = media_type(req.header("Content-Type"));
    // curl -d sends its JSON as a form unless told otherwise; the body is parsed as JSON either way.
    if (!iequals(type, "application/json") && !iequals(type, "application/x-www-form-urlencoded")) {
      res = error_at(req.path, 415, "the body must be JSON sent as 'Content-Type: application/json', got '" + type + "'",
                  "unsupported_media_type");
      return finish(req, res), true;
    }
  }
  if (route->options.run == Run::worker) return false;
  run(*route, req, res);
  return finish(req, res), true;
}

void Router::handle(Request& req, Response& res) {
  // handle_inline() already screened and authenticated this request.
  if (const Route* route = find(req)) {
    run(*route, req, res);
    req.parsed.reset();
    if (admission_.done) admission_.done(req);
  } else {
    res = error_at(req.path, 404, "no route for " + req.method + " " + req.path, "not_found");
  }
  finish(req, res);
}

Response Router::error(int status, const std::string& message, const std::string& code) {
  return error_at({}, status, message, code);
}

Response Router::error_at(std::string_view path, int status, const std::string& message, const std::string& code) {
  if (error_builder_) return error_builder_(status, message, code, path);
  Response res;
  res.status = status;
  res.set_content(message + "\n", "text/plain; charset=utf-8");
  return res;
}

}  // namespace kvasir::http
