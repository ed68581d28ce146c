// The one place that knows every runner: a model on the CPU or on a CUDA device, by
// RunnerOptions::device. Commands, the server and the engine factory build runners here, so a
// new backend is wired in once.
#pragma once
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "runtime/model_runner.h"
#include "runtime/session.h"

namespace kvasir::backends {

// The CPU runner (device -1) or the CUDA runner on device N (F16 KV only).
Result<std::unique_ptr<runtime::ModelRunner>> create_runner(const Model& model, const runtime::RunnerOptions& options);

// One sequence of options.n_ctx tokens on the runner options.device names.
Result<std::unique_ptr<runtime::Session>> create_session(const Model& model, const runtime::SessionOptions& options);

// A self-speculative draft over `target`'s own weights and KV: the given layers (ascending), then
// the output norm and a head over head_tokens (empty: the whole vocabulary). The CPU runner only.
Result<std::unique_ptr<runtime::ModelRunner>> create_self_draft(runtime::ModelRunner& target, std::vector<int32_t> layers,
                                                                std::vector<int32_t> head_tokens);

}  // namespace kvasir::backends
