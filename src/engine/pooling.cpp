#include "engine/pooling.h"

namespace kvasir::engine {

std::optional<Pooling> parse_pooling(std::string_view name) {
  if (name == "mean") return Pooling::mean;
  if (name == "cls") return Pooling::cls;
  if (name == "last") return Pooling::last;
  return std::nullopt;
}

std::string_view to_string(Pooling p) {
  switch (p) {
    case Pooling::none: return "none";
    case Pooling::mean: return "mean";
    case Pooling::cls: return "cls";
    case Pooling::last: return "last";
  }
  return "none";
}

Result<PoolingChoice> choose_pooling(const ModelConfig& c, std::string_view override_name) {
  if (!override_name.empty()) {
    auto p = parse_pooling(override_name);
    if (!p) return Error{"unknown pooling '" + std::string(override_name) + "' (mean, cls or last)", ErrorCode::invalid_argument};
    return PoolingChoice{*p, std::string(override_name) + " pooling (--pooling)"};
  }
  switch (c.pooling_type) {
    case -1: return PoolingChoice{Pooling::mean, "mean pooling (the file declares none)"};
    case 1: return PoolingChoice{Pooling::mean, "mean pooling (the file's)"};
    case 2: return PoolingChoice{Pooling::cls, "cls pooling (the file's)"};
    case 3: return PoolingChoice{Pooling::last, "last-token pooling (the file's)"};
    case 4: return PoolingChoice{Pooling::none, "the file is a reranker (pooling rank)"};
    default: return PoolingChoice{Pooling::none, "the file declares pooling none"};
  }
}

}  // namespace kvasir::engine
