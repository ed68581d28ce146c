// `kvasir prune`: a GGUF file rewritten with weights zeroed (unstructured: magnitude or Wanda, a
// sparsity per row / matrix / layer / model, or an N:M pattern) and/or structure removed: whole
// transformer layers (the file gets fewer blocks, renumbered) or FFN channels (a narrower
// feed_forward_length in every layer), so that it is smaller and runs faster.
//
// What is pruned: every weight matrix of the transformer blocks (attention, FFN, experts), never
// the embedding, the output head, norms or an MoE router. Tensors keep their types: float ones
// (F32/F16/BF16) hold their zeros exactly; a quantized one is dequantized, pruned and quantized
// again only with allow_requantize (and block formats with an offset, the K-quants, do not keep
// exact zeros: prune the float model, then quantize). Removing layers rewrites the metadata that
// counts them: block_count, the architecture's per-layer arrays, and for sliding-window families
// (Gemma 2/3) an explicit per-layer pattern, so each kept layer keeps its own kind of attention.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "calib/imatrix.h"
#include "compress/sparsity.h"
#include "core/status.h"

namespace kvasir::compress {

struct Unstructured {
  PruneMethod method = PruneMethod::magnitude;
  PruneScope scope = PruneScope::matrix;
  double sparsity = 0.5;  // ignored with an N:M pattern
  int n = 0, m = 0;       // N:M when m > 0
};

struct PruneOptions {
  std::optional<Unstructured> unstructured = {};
  std::vector<int64_t> remove_layers = {};      // of the input file
  // FFN channels kept in every layer (< 1: removed by sqrt(E[h_c²]) · ||W_down[:, c]||, which needs
  // the importance matrix's ffn_down entries), rounded to whole groups of 256 (32) where the width allows.
  double ffn_keep = 1.0;
  // Query heads kept in every KV group of every layer (0: all), ranked per layer by the attention
  // output's activation norms (the importance matrix's attn_output entry) times ||W_o[:, channel]||
  // summed over the head's channels; the K/V heads stay, so the model keeps its KV cache shape.
  int64_t heads_keep = 0;
  const calib::Imatrix* imatrix = nullptr;      // Wanda's column norms (by the input's tensor names)
  bool allow_requantize = false;
  int num_threads = 0;
  std::function<void(size_t done, size_t total, const std::string& name)> progress = {};
};

struct PrunedTensor {
  std::string name;  // in the output
  int64_t layer = -1;  // in the output
  int64_t elements = 0, zeros = 0;
};

struct PruneReport {
  int64_t layers_in = 0, layers_out = 0;
  std::vector<int64_t> removed_layers;  // of the input, ascending
  int64_t n_ff_in = 0, n_ff_out = 0;    // FFN width
  int64_t n_head_in = 0, n_head_out = 0;  // query heads
  std::vector<PrunedTensor> tensors;    // the sparsified ones
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
};

Result<PruneReport> prune_file(const std::string& in_path, const std::string& out_path, const PruneOptions& options);

// "blk.N.rest" -> N; -1 for other names.
int64_t layer_of_tensor(const std::string& name);

}  // namespace kvasir::compress
