// Who may use the server and from where: API keys (compared in constant time), the Host header
// (against DNS rebinding) and the Origin of browser requests (CORS). The router runs these as the
// first admission steps (http/router.h), on the transport's I/O thread; they never block. Which
// routes need a key is the route table's to say (http::Auth), not a list of paths here.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "http/message.h"

namespace kvasir::server {

struct AccessOptions {
  std::vector<std::string> api_keys;   // empty: no authentication
  bool metrics_public = false;         // /metrics without a key even when keys are set
  // Host header values (without port) accepted; "*" accepts any. Empty: the loopback names when
  // listening on a loopback address, else any.
  std::vector<std::string> allowed_hosts;
  // Origins (scheme://host[:port]) whose browser pages may call the API; "*" allows any. A page
  // served by this server itself (same origin) is always allowed.
  std::vector<std::string> cors_origins;
  std::string listen_host = "127.0.0.1";
};

// The index of the key that "Authorization: Bearer <token>" presents, if any. Every key is
// compared in full and the time depends only on the token's length, not on any key's.
std::optional<size_t> match_api_key(const std::string& authorization, const std::vector<std::string>& keys);

class AccessPolicy {
 public:
  explicit AccessPolicy(AccessOptions options);

  // Admission's screen: answers 400 (bad Host), 403 (Origin not allowed) or a CORS preflight,
  // returning true; else false.
  bool screen(http::Request& req, http::Response& res) const;
  // Admission's authentication: when the server has keys, answers 401 unless the request
  // presents one (returning true); else false, req.principal being the key's label.
  bool authenticate(http::Request& req, http::Response& res) const;
  // The router's finisher: CORS headers on responses to allowed cross-origin requests.
  void decorate(const http::Request& req, http::Response& res) const;
  bool has_keys() const { return !options_.api_keys.empty(); }

 private:
  bool host_allowed(const std::string& host) const;
  bool origin_allowed(const http::Request& req) const;

  AccessOptions options_;
};

// The label of API key `index`, used for per-key prefix-cache isolation ("key1", "key2", ...).
std::string key_label(size_t index);

}  // namespace kvasir::server
