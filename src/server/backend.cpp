#include "server/backend.h"

#include <cstdio>

namespace kvasir::server {

Result<std::unique_ptr<Backend>> load_backend(const BackendOptions& options) {
  auto b = std::make_unique<Backend>();
  auto model = options.load_model ? options.load_model() : Model::load(options.model_path);
  if (!model) return Error{model.error()};
  b->model = std::move(*model);
  auto tokenizer = Tokenizer::from_gguf(b->model->gguf());
  if (!tokenizer) return Error{options.model_path + ": " + tokenizer.error()};
  b->tokenizer.emplace(std::move(*tokenizer));
  auto template_source = chat::chat_template_override(options.chat_template_path);
  if (!template_source) return Error{template_source.error()};
  auto chat = chat::ChatFormatter::for_model(b->model->gguf(), *b->tokenizer, std::move(*template_source));
  if (!chat) return Error{options.model_path + ": " + chat.error()};
  b->chat = std::move(*chat);
  b->tool_syntax = tool_syntax_for(b->chat.source());
  // The vocabulary's grammar index, warmed with the JSON primitives (their string-body table), so
  // that the first structured request pays only for its own schema.
  b->grammars = std::make_unique<engine::GrammarCache>(engine::grammar_token_index(*b->tokenizer), options.json_whitespace);
  if (auto g = b->grammars->get({engine::GrammarSpec::Kind::json_object, ""}); !g) return Error{g.error()};
  auto pooling = engine::choose_pooling(b->model->config(), options.pooling);
  if (!pooling) return Error{pooling.error()};
  b->pooling = std::move(*pooling);
  backends::ServingOptions serving = options.serving;
  if (options.prepare_engine)
    if (auto s = options.prepare_engine(*b->model, *b->tokenizer, serving); !s) return Error{s.error(), s.error_code()};
  b->kv_guard_kld = serving.kv_guard_kld;
  auto core = backends::create_engine_core(*b->model, *b->tokenizer, serving);
  if (!core) return Error{core.error()};
  b->default_max_tokens = options.default_max_tokens;
  b->max_model_len = (*core)->stats().max_model_len;  // the Engine's copy fills in after its first step
  b->engine = std::make_unique<engine::Engine>(std::move(*core));
  if (options.prefill_role) {
    auto pusher = disagg::KvPusher::create(*b->engine);
    if (!pusher) return Error{"prefill role: " + pusher.error(), pusher.error_code()};
    b->pusher = std::move(*pusher);
  }
  if (options.decode_role) {
    auto puller = disagg::KvPuller::create(*b->engine, options.pull);
    if (!puller) return Error{"decode role: " + puller.error(), puller.error_code()};
    b->puller = std::move(*puller);
  }
  for (const auto& [name, path] : options.loras)
    if (auto s = b->loras->load(name, path, 1.f, b->engine->runner(), options.served_name); !s)
      return Error{"--lora " + name + ": " + s.error(), s.error_code()};
  if (!options.ollama_models_dir.empty()) {
    auto catalog = OllamaCatalog::open(options.ollama_models_dir);
    if (!catalog) std::fprintf(stderr, "kvasir serve: %s; /api/create, /api/copy, /api/pull answer 503\n", catalog.error().c_str());
    else b->catalog = std::move(*catalog);
  }
  if (b->max_model_len <= 0) return Error{"the engine reports no usable context (max_model_len 0)"};
  return b;
}

}  // namespace kvasir::server
