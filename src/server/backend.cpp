#include "server/backend.h"

#include <fstream>
#include <sstream>

#include "chat/builtin_templates.h"

namespace kvasir::server {

namespace {

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read " + path};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::unique_ptr<Backend>> load_backend(const BackendOptions& options) {
  auto b = std::make_unique<Backend>();
  auto model = Model::load(options.model_path);
  if (!model) return Error{model.error()};
  b->model = std::move(*model);
  auto tokenizer = Tokenizer::from_gguf(b->model->gguf());
  if (!tokenizer) return Error{options.model_path + ": " + tokenizer.error()};
  b->tokenizer.emplace(std::move(*tokenizer));
  std::string template_source;
  if (chat::find_builtin_template(options.chat_template_path)) {
    template_source = options.chat_template_path;  // a built-in's name
  } else if (!options.chat_template_path.empty()) {
    auto t = read_text(options.chat_template_path);
    if (!t) return Error{t.error()};
    template_source = std::move(*t);
  }
  auto chat = ChatFormatter::for_model(b->model->gguf(), *b->tokenizer, std::move(template_source));
  if (!chat) return Error{options.model_path + ": " + chat.error()};
  b->chat = std::move(*chat);
  auto core = engine::EngineCore::create(*b->model, *b->tokenizer, options.engine);
  if (!core) return Error{core.error()};
  b->max_model_len = (*core)->stats().max_model_len;  // the Engine's copy fills in after its first step
  b->engine = std::make_unique<engine::Engine>(std::move(*core));
  if (b->max_model_len <= 0) return Error{"the engine reports no usable context (max_model_len 0)"};
  return b;
}

}  // namespace kvasir::server
