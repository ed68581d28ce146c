// What Ollama's generation routes (routes_ollama.cpp) and its model management routes
// (routes_ollama_models.cpp) share.
#pragma once
#include <optional>
#include <string>

#include "http/message.h"
#include "server/protocol.h"
#include "server/state.h"

namespace kvasir::server {

// {"error": "message"} with the status (and Retry-After).
void send_ollama_error(http::Response& res, const ApiError& error);
// One /api/tags entry for the served model's weights under `name` ("NAME:latest" style).
ordered_json ollama_model_entry(const Backend& b, const std::string& name);
// The served model's details object (format, family, sizes, quantization).
ordered_json ollama_details(const Backend& b);

// A request naming a catalog entry (server/ollama_catalog.h) gets the entry's defaults: its
// system prompt where the request has none, its parameters under the request's own `options`,
// and `model` rewritten to what the entry derives from (the served model or an adapter). A 404
// for an entry of other weights than the served model's. Requests naming no entry are untouched.
// `chat_template` (when given) receives the entry's own chat template (empty: the model's).
std::optional<ApiError> apply_catalog(const ServerState& st, const Backend& b, ordered_json& doc, bool is_chat,
                                      std::string* chat_template = nullptr);
// /api/tags: the served model, its adapters, then the catalog's entries.
ordered_json ollama_tags(const ServerState& st, const Backend& b);

}  // namespace kvasir::server
