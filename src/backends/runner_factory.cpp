#include "backends/runner_factory.h"

#include "cuda/cuda_runner.h"
#include "runtime/cpu_runner.h"

namespace kvasir::backends {

Result<std::unique_ptr<runtime::ModelRunner>> create_runner(const Model& model, const runtime::RunnerOptions& o) {
  if (o.device >= 0) return cuda::create_runner(model, o);
  auto r = runtime::CpuRunner::create(model, o);
  if (!r) return Error{r.error(), r.error_code()};
  return std::unique_ptr<runtime::ModelRunner>(std::move(*r));
}

Result<std::unique_ptr<runtime::Session>> create_session(const Model& model, const runtime::SessionOptions& o) {
  if (o.n_ctx <= 0) return Error{"context size must be positive", ErrorCode::invalid_argument};
  auto r = create_runner(model, o.runner_options());
  if (!r) return Error{r.error(), r.error_code()};
  return runtime::Session::create(std::move(*r), o.n_ctx);
}

Result<std::unique_ptr<runtime::ModelRunner>> create_self_draft(runtime::ModelRunner& target, std::vector<int32_t> layers,
                                                                std::vector<int32_t> head_tokens) {
  auto* cpu = dynamic_cast<runtime::CpuRunner*>(&target);
  if (!cpu)
    return Error{"self-speculation (early exit, layer skipping) runs on the CPU runner only", ErrorCode::invalid_argument};
  return cpu->self_draft({.layers = std::move(layers), .head_tokens = std::move(head_tokens)});
}

}  // namespace kvasir::backends
