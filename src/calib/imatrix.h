// Importance matrices as llama.cpp computes and stores them: for every weight matrix of the
// transformer blocks (and output.weight on request), the sum over calibration tokens of each
// input column's squared activation, and how many tokens were summed (per expert for the 3-D
// expert tensors). collect_imatrix runs the model over the text the way llama-imatrix does
// (chunks of n_ctx tokens, BOS first, every token counted) through Forward's activation hook;
// the files are llama.cpp's: its GGUF form (`<tensor>.in_sum2` [n_mat][n_in] and
// `<tensor>.counts` [n_mat], general.type "imatrix", imatrix.datasets / chunk_count / chunk_size)
// written and read, its older binary form (.dat) read, so each tool reads the other's files.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace kvasir::calib {

struct ImatrixEntry {
  std::vector<float> sums;    // [n_mat][n_in]: summed squared activations
  std::vector<float> counts;  // [n_mat]: tokens summed (0: an expert no token chose)
  int64_t n_in() const { return counts.empty() ? 0 : int64_t(sums.size() / counts.size()); }
  // Mean squared activation of column j of matrix m: what quantizers weigh errors by.
  float mean(int64_t m, int64_t j) const;
  // The weights a quantizer takes, [n_mat][n_in], as llama-quantize prepares them: the means, and
  // 1 for a matrix no token reached (an expert never chosen).
  std::vector<float> quantize_weights() const;
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name, e.g. blk.0.attn_q.weight
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0, chunk_size = 0;
};

struct ImatrixOptions {
  int64_t n_ctx = 512;
  int64_t max_chunks = -1;      // -1: every whole chunk of the text
  int num_threads = 0;
  int32_t bos = -1;             // replaces each chunk's first token when >= 0
  bool process_output = false;  // also output.weight (llama-imatrix --process-output)
  std::string dataset = {};     // recorded in imatrix.datasets
  std::function<void(int64_t chunk, int64_t chunks)> on_chunk = {};
};

// Needs at least 2 * n_ctx tokens, as llama-imatrix does.
Result<Imatrix> collect_imatrix(const Model& model, std::span<const int32_t> tokens, const ImatrixOptions& options);

Status write_imatrix(const Imatrix& imatrix, const std::string& path);  // llama.cpp's GGUF form
Result<Imatrix> read_imatrix(const std::string& path);                 // GGUF form or legacy .dat
Result<Imatrix> parse_imatrix(std::span<const uint8_t> bytes);          // the same, from memory

}  // namespace kvasir::calib
