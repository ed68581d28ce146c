#include "backends/engine_factory.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "backends/runner_factory.h"
#include "spec/eagle_proposer.h"

namespace kvasir::backends {
namespace {

using engine::SpecMethod;

// The layers a self-speculative draft runs: the first exit_layer (early exit), or all but the
// skipped ones (layer skipping).
Result<std::vector<int32_t>> self_draft_layers(const engine::SpecOptions& spec, int64_t n_layers) {
  if (spec.method == SpecMethod::early_exit && (spec.exit_layer < 1 || spec.exit_layer >= n_layers))
    return Error{"the exit layer must be in [1, " + std::to_string(n_layers - 1) + "]", ErrorCode::invalid_argument};
  for (int32_t il : spec.skip_layers)
    if (il < 0 || il >= n_layers)
      return Error{"skipped layer " + std::to_string(il) + " is outside the model's " + std::to_string(n_layers) + " layers",
                   ErrorCode::invalid_argument};
  std::vector<int32_t> layers;
  for (int32_t il = 0; il < int32_t(n_layers); ++il) {
    const bool skip = spec.method == SpecMethod::early_exit
                          ? il >= spec.exit_layer
                          : std::find(spec.skip_layers.begin(), spec.skip_layers.end(), il) != spec.skip_layers.end();
    if (!skip) layers.push_back(il);
  }
  if (spec.method == SpecMethod::layer_skip && (spec.skip_layers.empty() || layers.empty()))
    return Error{"layer skipping needs a non-empty set of layers to skip that leaves at least one", ErrorCode::invalid_argument};
  return layers;
}

// A draft model's runner on the target's device, its F16 KV holding as many tokens as the
// target's (at most draft_kv_mem_bytes, default 512 MiB).
Result<std::unique_ptr<runtime::ModelRunner>> draft_model_runner(const engine::SpecOptions& spec,
                                                                 const runtime::RunnerOptions& target_options,
                                                                 const runtime::RunnerInfo& target) {
  if (!spec.draft_model) return Error{"speculation with a draft model needs the draft model", ErrorCode::invalid_argument};
  runtime::RunnerOptions o = target_options;
  o.kv = {.block_size = target.block_size};
  const uint64_t per_token = KvCache::bytes_per_token(spec.draft_model->config(), o.kv);
  const uint64_t cap = spec.draft_kv_mem_bytes > 0 ? spec.draft_kv_mem_bytes : 512ull << 20;
  const uint64_t tokens =
      std::min<uint64_t>(uint64_t(target.n_kv_blocks * target.block_size), cap / std::max<uint64_t>(per_token, 1));
  o.kv.n_blocks = std::max<int64_t>(2, int64_t(tokens / uint64_t(target.block_size)));
  auto d = create_runner(*spec.draft_model, o);
  if (!d) return Error{"draft model: " + d.error(), d.error_code()};
  return d;
}

}  // namespace

Result<std::unique_ptr<engine::EngineCore>> create_engine_core(const Model& model, const Tokenizer& tokenizer,
                                                               const ServingOptions& so) {
  const engine::EngineOptions& o = so.engine;
  if (o.max_batch_tokens < 1 || o.max_seqs < 1 || o.max_seqs > o.max_batch_tokens)
    return Error{"need 1 <= max_seqs <= max_batch_tokens", ErrorCode::invalid_argument};
  engine::EngineOptions eo = o;
  if (!eo.pool) eo.pool = std::make_shared<ThreadPool>(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  const runtime::RunnerOptions ro{.device = so.device,
                                  .max_batch_tokens = o.max_batch_tokens,
                                  .n_threads = eo.pool->num_threads(),
                                  .kv = so.kv,
                                  .default_kv_tokens = int64_t(o.max_seqs) * 2048,
                                  .pool = eo.pool};
  auto runner = create_runner(model, ro);
  if (!runner) return Error{runner.error(), runner.error_code()};
  std::unique_ptr<runtime::ModelRunner> draft;
  const engine::SpecOptions& spec = o.spec;
  if (spec.method == SpecMethod::draft) {
    auto d = draft_model_runner(spec, ro, (*runner)->info());
    if (!d) return Error{d.error(), d.error_code()};
    draft = std::move(*d);
  } else if (spec.method == SpecMethod::early_exit || spec.method == SpecMethod::layer_skip) {
    auto layers = self_draft_layers(spec, model.config().n_layers);
    if (!layers) return Error{layers.error(), layers.error_code()};
    auto d = create_self_draft(**runner, std::move(*layers), spec.head_tokens);
    if (!d) return Error{d.error(), d.error_code()};
    draft = std::move(*d);
  }
  std::unique_ptr<spec::Proposer> head;
  if (spec.method == SpecMethod::head) {
    auto clock = eo.clock ? std::function<int64_t()>(eo.clock) : std::function<int64_t()>([] {
      return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
    });
    auto p = spec::eagle_proposer(model, spec.head_file, eo.pool, std::move(clock), spec.head_min_confidence);
    if (!p) return Error{p.error(), p.error_code()};
    head = std::move(*p);
  }
  return engine::EngineCore::create(std::move(*runner), tokenizer, eo, std::move(draft), spec.head_tokens, std::move(head));
}

}  // namespace kvasir::backends
