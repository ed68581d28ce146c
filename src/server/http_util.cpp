#include "server/http_util.h"

#include <algorithm>

#include "server/responses.h"

namespace kvasir::server {

void send_json(http::Response& res, int status, const ordered_json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(http::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error_body(error), "application/json");
  if (error.retry_after_s > 0) res.headers.set("Retry-After", std::to_string(error.retry_after_s));
}

http::Response error_response(const ApiError& error) {
  http::Response res;
  send_error(res, error);
  return res;
}

ApiError api_error(const Error& error) {
  ApiError e = api_error(error.code, error.message);
  if (error.retry_after_ms > 0) e.retry_after_s = (error.retry_after_ms + 999) / 1000;
  return e;
}

ApiError api_error(ErrorCode code, std::string message) {
  switch (code) {
    case ErrorCode::not_found: return ApiError{.status = 404, .message = std::move(message), .code = "not_found"};
    case ErrorCode::too_large: return ApiError{.status = 413, .message = std::move(message), .code = "too_large"};
    case ErrorCode::exhausted:
      return ApiError{.status = 429, .message = std::move(message), .type = "server_error", .code = "exhausted"};
    case ErrorCode::unavailable:
      return ApiError{.status = 503, .message = std::move(message), .type = "server_error", .code = "unavailable"};
    case ErrorCode::internal:
      return ApiError{.status = 500, .message = std::move(message), .type = "server_error", .code = "internal_error"};
    case ErrorCode::invalid_argument:
    case ErrorCode::unknown: break;
  }
  return bad_request(std::move(message));
}

std::optional<ApiError> only_fields(const ordered_json& doc, std::initializer_list<std::string_view> known) {
  if (!doc.is_object()) return bad_request("the request body must be a JSON object", {}, "invalid_json");
  for (const auto& [k, v] : doc.items())
    if (!v.is_null() && std::find(known.begin(), known.end(), k) == known.end())
      return bad_request("'" + k + "' is not supported by this server (see docs/API.md)", k, "unsupported_field");
  return std::nullopt;
}

}  // namespace kvasir::server
