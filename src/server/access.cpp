#include "server/access.h"

#include <algorithm>

#include "server/http_util.h"

namespace kvasir::server {

namespace {

bool contains(const std::vector<std::string>& list, const std::string& value) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& x) { return x == "*" || http::iequals(x, value); });
}

// "example.com:8080" -> "example.com", "[::1]:8080" -> "[::1]"; "" when what follows the name is
// not ":digits" ("[::1]x", "a:b:c", "host:"), so a malformed Host matches no allowed name.
std::string host_without_port(const std::string& host) {
  const size_t end = !host.empty() && host[0] == '[' ? host.find(']') + 1 : host.find(':');
  if (end == 0 || end == std::string::npos) return end == 0 ? "" : host;  // "[..." without ']'; no port
  const std::string_view port = std::string_view(host).substr(end);
  if (port.empty()) return host;
  if (port.size() < 2 || port.size() > 6 || port[0] != ':' ||
      !std::all_of(port.begin() + 1, port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return "";
  return host.substr(0, end);
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

}  // namespace

std::optional<size_t> match_api_key(const std::string& authorization, const std::vector<std::string>& keys) {
  static const std::string kPrefix = "Bearer ";
  const bool bearer = authorization.size() >= kPrefix.size() && http::iequals(authorization.substr(0, 7), kPrefix);
  const std::string_view token = bearer ? std::string_view(authorization).substr(kPrefix.size()) : std::string_view();
  std::optional<size_t> found;
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::string& key = keys[k];  // never empty (checked when options are read)
    // Walks the token, not the key: the time says nothing about the key's length or content.
    unsigned diff = token.size() != key.size() ? 1u : 0u;
    for (size_t i = 0; i < token.size(); ++i)
      diff |= unsigned(uint8_t(token[i]) ^ uint8_t(key[i % key.size()]));
    if (diff == 0 && bearer && !found) found = k;
  }
  return found;
}

std::string key_label(size_t index) { return "key" + std::to_string(index + 1); }

AccessPolicy::AccessPolicy(AccessOptions options) : options_(std::move(options)) {
  if (options_.allowed_hosts.empty() && is_loopback(options_.listen_host))
    options_.allowed_hosts = {"localhost", "127.0.0.1", "[::1]", options_.listen_host};
}

bool AccessPolicy::host_allowed(const std::string& host) const {
  if (host.empty()) return true;  // HTTP/1.0 sends no Host
  const std::string name = host_without_port(host);
  if (name.empty()) return false;  // malformed, whatever is allowed
  return options_.allowed_hosts.empty() || contains(options_.allowed_hosts, name);
}

bool AccessPolicy::origin_allowed(const http::Request& req) const {
  const std::string& origin = req.header("Origin");
  if (origin.empty()) return true;  // not a browser's cross-site request
  const std::string& host = req.header("Host");
  if (!host.empty() && (origin == "http://" + host || origin == "https://" + host)) return true;  // our own page
  return contains(options_.cors_origins, origin);
}

bool AccessPolicy::screen(http::Request& req, http::Response& res) const {
  if (!host_allowed(req.header("Host"))) {
    res = error_response(ApiError{.status = 400,
                                  .message = "Host '" + req.header("Host") + "' is not allowed (see --allowed-hosts)",
                                  .code = "host_not_allowed"});
    return true;
  }
  if (!origin_allowed(req)) {
    res = error_response(ApiError{.status = 403,
                                  .message = "Origin '" + req.header("Origin") + "' is not allowed (see --cors-origin)",
                                  .code = "origin_not_allowed"});
    return true;
  }
  if (req.method == "OPTIONS" && req.headers.has("Access-Control-Request-Method")) {
    res = http::Response{};
    res.status = 204;
    res.headers.set("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.headers.set("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.headers.set("Access-Control-Max-Age", "600");
    return true;  // decorate() adds the origin
  }
  return false;
}

bool AccessPolicy::authenticate(http::Request& req, http::Response& res) const {
  if (options_.api_keys.empty()) return false;
  if (auto k = match_api_key(req.header("Authorization"), options_.api_keys)) {
    req.principal = key_label(*k);
    return false;
  }
  res = error_response(ApiError{.status = 401,
                                .message = "missing or incorrect API key: send 'Authorization: Bearer <key>'",
                                .code = "invalid_api_key"});
  res.headers.set("WWW-Authenticate", "Bearer");
  return true;
}

void AccessPolicy::decorate(const http::Request& req, http::Response& res) const {
  const std::string& origin = req.header("Origin");
  if (origin.empty() || !contains(options_.cors_origins, origin)) return;
  res.headers.set("Access-Control-Allow-Origin", origin);
  res.headers.set("Vary", "Origin");
}

}  // namespace kvasir::server
