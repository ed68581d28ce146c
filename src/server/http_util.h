// Small HTTP helpers shared by the routes: JSON replies and OpenAI-style errors.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "http/message.h"
#include "server/protocol.h"

namespace kvasir::server {

void send_json(http::Response& res, int status, const ordered_json& body);
// Sets the status and the {"error": ...} body (the server counts error statuses once, as they go out).
void send_error(http::Response& res, const ApiError& error);
http::Response error_response(const ApiError& error);
// An error from the engine as the API says it: the one mapping of ErrorCode to HTTP statuses.
ApiError api_error(ErrorCode code, std::string message);
ApiError api_error(const Error& error);  // with Retry-After from retry_after_ms
// Only `known` fields (a null counts as absent); else a 400 naming the field (unsupported_field).
std::optional<ApiError> only_fields(const ordered_json& doc, std::initializer_list<std::string_view> known);

}  // namespace kvasir::server
