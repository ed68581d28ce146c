// Small HTTP helpers shared by the routes: JSON replies, OpenAI-style errors, bearer auth.
#pragma once
#include <string>

#include <httplib.h>

#include "server/metrics.h"
#include "server/protocol.h"

namespace kvasir::server {

void send_json(httplib::Response& res, int status, const ordered_json& body);
// Sets the status and the {"error": ...} body; counts it in the metrics when given.
void send_error(httplib::Response& res, const ApiError& error, Metrics* metrics = nullptr);
// "Authorization: Bearer KEY" matches (compared in constant time). An empty key allows everything.
bool authorized(const httplib::Request& req, const std::string& api_key);
// Paths that need the API key: the OpenAI API and the tokenizer endpoints. Health, metrics and the
// web page stay open (the page asks for the key itself).
bool needs_auth(const std::string& path);

}  // namespace kvasir::server
