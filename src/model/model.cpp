#include "model/model.h"

namespace kvasir {

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  auto model = std::unique_ptr<Model>(new Model());
  auto file = MappedFile::open(path);
  if (!file) return Error{file.error()};
  model->file_ = std::move(*file);
  auto parsed = gguf::parse(model->file_.bytes());
  if (!parsed) return Error{path + ": " + parsed.error()};
  model->gguf_ = std::move(*parsed);
  auto config = config_from_gguf(model->gguf_);
  if (!config) return Error{path + ": " + config.error()};
  model->config_ = std::move(*config);
  auto weights = bind_weights(model->gguf_, model->config_);
  if (!weights) return Error{path + ": " + weights.error()};
  model->weights_ = std::move(*weights);
  return model;
}

}  // namespace kvasir
