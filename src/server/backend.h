// Loads what the server serves: model file, tokenizer, chat template and a running engine.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "backends/engine_factory.h"
#include "disagg/decode_service.h"
#include "engine/engine.h"
#include "server/state.h"

namespace kvasir::server {

struct BackendOptions {
  std::string model_path = {};
  std::string chat_template_path = {};  // a file or a built-in's name; empty: the model's own (else its family's built-in)
  std::string pooling = {};  // embeddings: mean, cls or last; empty: the file's (mean when it declares none)
  grammar::JsonWhitespace json_whitespace = grammar::JsonWhitespace::bounded;  // --json-whitespace
  int32_t default_max_tokens = 0;  // --default-max-tokens
  backends::ServingOptions serving = {};
  // How the model is loaded (the CLI's --quantize quantizes in memory); empty: Model::load(model_path).
  std::function<Result<std::unique_ptr<Model>>()> load_model = {};
  // Called once the model and tokenizer are loaded, before the engine is built: what needs the
  // model to decide engine options (the KV guard's per-layer types).
  std::function<Status(const Model&, const Tokenizer&, backends::ServingOptions&)> prepare_engine = {};
  // Disaggregation roles: a prefill instance answers /internal/kv/prefill; a decode instance
  // listens for KV (pull) and fetches it for requests the router gives a prefill instance.
  bool prefill_role = false, decode_role = false;
  // LoRA adapters served from the start: (name, file); the base model's name is served_name.
  std::vector<std::pair<std::string, std::string>> loras = {};
  std::string served_name = {};
  std::string ollama_models_dir = {};  // the catalog's folder (Ollama's /api/create, /api/pull); empty: none
  disagg::PullOptions pull = {};
};

Result<std::unique_ptr<Backend>> load_backend(const BackendOptions& options);

}  // namespace kvasir::server
