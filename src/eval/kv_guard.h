// The KV guard: a quantized KV cache priced before it serves. On one chunk of a short text, the
// mean KL divergence of the next-token distributions (the chunk's second half) with the KV type
// against an F16 KV cache; over the
// budget, layers fall back to F16, the most sensitive first (each layer's own cost measured with
// it alone quantized), as few as keep the whole under the budget (found by bisection over how
// many). The choice is the per-layer type list KvOptions::layer_types takes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/kv_transform.h"
#include "model/model.h"

namespace kvasir::eval {

struct KvGuardOptions {
  DType type = DType::Q8_0;  // the quantized KV type wanted
  double max_kld = 0.01;
  bool rotate_k = true;
  std::shared_ptr<const KvTransform> transform = nullptr;  // the quantized layers' basis
  int64_t n_ctx = 256;  // the chunk: at most 2 + n_layers + log2(n_layers) passes over it
  int num_threads = 0;
  int32_t bos = -1;
};

struct KvGuardResult {
  std::vector<DType> layer_types;  // per layer: the type, or F16 where it fell back
  double kld = 0;                  // of the chosen layer types
  double kld_all = 0;              // with every layer quantized
  int64_t quantized_layers = 0;
};

Result<KvGuardResult> kv_guard(const Model& model, std::span<const int32_t> tokens, const KvGuardOptions& options);

// A short English text the guard measures on when none is given (about 700 tokens).
extern const char* const kKvGuardText;

}  // namespace kvasir::eval
