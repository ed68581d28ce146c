// Which pooling embedding requests get: the model file's declaration, a user's override, or for
// generative models (which declare none) the mean over the prompt's tokens.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/engine.h"
#include "model/config.h"

namespace kvasir::engine {

struct PoolingChoice {
  Pooling pooling = Pooling::none;  // none: this model serves no embeddings (origin says why)
  std::string origin;               // for the start-up line and the error message
};

std::optional<Pooling> parse_pooling(std::string_view name);  // "mean", "cls", "last"
std::string_view to_string(Pooling p);
// `override_name` (--pooling; empty: none given) wins; else <arch>.pooling_type (1 mean, 2 cls,
// 3 last; 0 none and 4 rank serve no embeddings); a file without the key gets mean.
Result<PoolingChoice> choose_pooling(const ModelConfig& config, std::string_view override_name);

}  // namespace kvasir::engine
