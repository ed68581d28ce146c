// What every HTTP handler shares: options, metrics, the lifecycle phase and, once loaded, the
// model, tokenizer, engine and chat formatter.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "disagg/decode_service.h"
#include "disagg/prefill_service.h"
#include "engine/engine.h"
#include "engine/pooling.h"
#include "engine/structured.h"
#include "model/model.h"
#include "server/access.h"
#include "server/lora_adapters.h"
#include "server/ollama_catalog.h"
#include "server/slo.h"
#include "chat/chat_format.h"
#include "server/tool_calls.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (see HttpServer::port())
  AccessOptions access;              // API keys, allowed hosts, CORS (access.listen_host: set from host)
  size_t max_body_bytes = 8u << 20;  // larger request bodies get 413
  int http_threads = 0;              // worker threads for blocking handlers; 0: 256
  size_t max_connections = 4096;     // open connections at most (idle ones cost no thread)
  std::string served_model_name;     // the id clients name in "model"
  std::string metrics_prefix = "kvasir:";  // --metrics-prefix
  SloOptions slo;                    // tenants, classes, TTFT deadlines (server/slo.h)
  bool allow_runtime_lora = false;   // --allow-runtime-lora: /v1/load_lora_adapter and unload answer
  bool rerank_generative = false;    // --rerank generative: /v1/rerank and /v1/score as a cross-encoder
};

// Everything loaded from the model file. Members are declared so that the engine, which holds
// references to the model and tokenizer, is destroyed first.
struct Backend {
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
  chat::ChatFormatter chat;
  ToolSyntax tool_syntax = ToolSyntax::generic;  // the template's tool-call syntax, read once at load
  std::unique_ptr<engine::Engine> engine;
  // Disaggregation (after the engine: they hold it). A prefill instance pushes prompts' KV to
  // decode instances; a decode instance pulls it before computing a prompt the router placed.
  std::unique_ptr<disagg::KvPusher> pusher;
  std::unique_ptr<disagg::KvPuller> puller;
  std::unique_ptr<engine::GrammarCache> grammars;  // structured output, compiled per vocabulary
  std::unique_ptr<LoraAdapters> loras = std::make_unique<LoraAdapters>();  // served by model name
  std::unique_ptr<OllamaCatalog> catalog;  // Ollama's created and pulled models; null: no folder
  engine::PoolingChoice pooling;                   // what /v1/embeddings pools
  int32_t max_model_len = 0;
  int32_t default_max_tokens = 0;  // serve --default-max-tokens: for requests that name none (0: the endpoint's)
  double kv_guard_kld = -1;  // what the KV guard measured for the served KV types (-1: no guard)
};

enum class Phase { loading, ready, draining, failed };

class ServerState {
 public:
  explicit ServerState(ServerOptions options)
      : options(std::move(options)), metrics(this->options.served_model_name, this->options.metrics_prefix) {
    metrics.set_tpot_slo(this->options.slo.tpot_slo_ms / 1e3);
  }

  const ServerOptions options;
  Metrics metrics;

  Phase phase() const { return phase_.load(std::memory_order_acquire); }
  void set_phase(Phase p) { phase_.store(p, std::memory_order_release); }
  // Publishes the backend; handlers see it once phase() is ready.
  void attach(std::unique_ptr<Backend> backend) {
    backend_ = std::move(backend);
    set_phase(Phase::ready);
  }
  Backend* backend() const { return phase() == Phase::loading ? nullptr : backend_.get(); }
  std::unique_ptr<Backend> detach() { return std::move(backend_); }

  // The transport's gauges, for /metrics (set by HttpServer).
  std::function<HttpGauges()> http_gauges;

  // Generation requests still writing a response; drain waits for zero.
  std::atomic<int64_t> active_generations{0};

 private:
  std::atomic<Phase> phase_{Phase::loading};
  std::unique_ptr<Backend> backend_;
};

// Counts one in-flight generation for as long as it lives.
class ActiveGuard {
 public:
  explicit ActiveGuard(ServerState& s) : s_(s) { s_.active_generations.fetch_add(1); }
  ~ActiveGuard() { s_.active_generations.fetch_sub(1); }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;

 private:
  ServerState& s_;
};

}  // namespace kvasir::server
