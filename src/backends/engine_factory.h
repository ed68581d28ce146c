// An engine over a model file's weights: the runner (backends/runner_factory.h), the draft runner
// speculation asks for, and one pool of CPU threads that the CPU runner's kernels and the
// engine's sampling share. What `serve`, `batch`, `run`, `chat` and `embed` start from.
#pragma once
#include <memory>

#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::backends {

struct ServingOptions {
  engine::EngineOptions engine = {};
  int device = -1;   // CUDA device ordinal; -1: the CPU
  // How the runner stores K and V, and how much: neither n_blocks nor mem_bytes gives enough for
  // max_seqs x 2048 tokens (capped at 1 GiB on the CPU, 4 GiB on a GPU).
  KvOptions kv = {};
  double kv_guard_kld = -1;  // what the KV guard measured for kv.layer_types (-1: no guard); for /metrics
};

Result<std::unique_ptr<engine::EngineCore>> create_engine_core(const Model& model, const Tokenizer& tokenizer,
                                                               const ServingOptions& options);

}  // namespace kvasir::backends
