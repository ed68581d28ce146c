#include "server/http_util.h"

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

}  // namespace kvasir::server
