#include "server/http_util.h"

#include "server/responses.h"

namespace kvasir::server {

void send_json(httplib::Response& res, int status, const ordered_json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error, Metrics* metrics) {
  res.status = error.status;
  res.set_content(error_body(error), "application/json");
  if (metrics) metrics->count_http_error(error.status);
}

bool authorized(const httplib::Request& req, const std::string& api_key) {
  if (api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.size() != prefix.size() + api_key.size() || header.compare(0, prefix.size(), prefix) != 0) return false;
  unsigned char diff = 0;  // no early exit: the time does not tell how many characters matched
  for (size_t i = 0; i < api_key.size(); ++i) diff |= static_cast<unsigned char>(header[prefix.size() + i] ^ api_key[i]);
  return diff == 0;
}

bool needs_auth(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

}  // namespace kvasir::server
