// The HTTP routes, registered on the router. Handlers never throw: every failure is an
// OpenAI-style error with an exact status (400 bad request, 401 auth, 404 unknown model or path,
// 405 wrong method, 413 body too large, 415 not JSON, 503 loading or draining).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "http/router.h"
#include "server/generation.h"
#include "server/state.h"

namespace kvasir::server {

// Every route below, behind the one admission path (server/admission.h) with `access`'s keys,
// Host and Origin rules (server.cpp). The server and the route-table test build their router so.
void register_routes(http::Router& router, ServerState& state, const AccessPolicy& access);

// POST /v1/completions, POST /v1/chat/completions (routes_generate.cpp)
void register_generation_routes(http::Router& router, ServerState& state);
// POST /v1/responses, OpenAI's Responses API (routes_responses.cpp)
void register_responses_routes(http::Router& router, ServerState& state);
// Ollama's /api/generate, /api/chat, /api/tags, /api/show, /api/ps, /api/version (routes_ollama.cpp)
void register_ollama_routes(http::Router& router, ServerState& state);
// POST /api/create, /api/copy, /api/pull, DELETE /api/delete (routes_ollama_models.cpp)
void register_ollama_model_routes(http::Router& router, ServerState& state);
// llama-server's POST /completion, GET /props, GET /slots (routes_llamacpp.cpp)
void register_llamacpp_routes(http::Router& router, ServerState& state);
// POST /v1/embeddings, Ollama's /api/embed and /api/embeddings (routes_embeddings.cpp)
void register_embedding_routes(http::Router& router, ServerState& state);
// GET /, /health, /metrics, /v1/models; POST /tokenize, /detokenize (routes_info.cpp)
void register_info_routes(http::Router& router, ServerState& state);

// POST /internal/kv/prefill: prefill/decode disaggregation (routes_disagg.cpp)
void register_disagg_routes(http::Router& router, ServerState& state);
// A decode instance's KV pull for a request the router gave a prefill instance (X-Kvasir-Prefill);
// empty when there is nothing to pull.
GenerationJob::KvFetch kv_fetch_for(Backend& b, const http::Request& req);

// Shared by both: the loaded backend when requests are being served, else sends 503 and returns null.
Backend* serving_backend(ServerState& state, http::Response& res);
// A conversation rendered with the chat template, checked against the context and tokenized:
// the prompt and its max_tokens (the request's, or the rest of the context). Template errors are
// a 400 naming `messages_param`.
struct ChatPrompt {
  std::vector<int32_t> ids;
  int32_t max_tokens = 0;
};
// `formatter`: another chat template than the model's (an Ollama catalog entry's); null: b.chat.
Parsed<ChatPrompt> chat_prompt(const Backend& b, const ordered_json& messages, const chat::ChatRenderOptions& options,
                               const GenerationRequest& gen, const std::string& messages_param,
                               const chat::ChatFormatter* formatter = nullptr);

// Submits `params` (choice i of prompt prompt_of[i]) and waits for every choice to finish,
// handing each delta to `on_delta` (an error it returns aborts the rest and is returned); a client
// that hangs up aborts them (499). For answers built whole from the engine's output (embeddings,
// rerank scores).
std::optional<ApiError> run_to_end(ServerState& st, Backend& b, const http::Request& req,
                                   std::vector<engine::GenerationParams> params, std::vector<int32_t> prompt_of,
                                   const std::function<std::optional<ApiError>(int32_t choice, engine::Delta& d)>& on_delta);

// 404 model_not_found unless `model` is empty or the served name.
std::optional<ApiError> check_model(const std::string& model, const ServerState& state);
// For generation: the served name (or none) is the base model, a LoRA adapter's name selects it
// (gen.adapter); anything else is 404 model_not_found.
std::optional<ApiError> select_model(GenerationRequest& gen, const ServerState& state, const Backend& backend);

// POST /v1/load_lora_adapter, /v1/unload_lora_adapter (routes_lora.cpp)
void register_lora_routes(http::Router& router, ServerState& state);

}  // namespace kvasir::server
