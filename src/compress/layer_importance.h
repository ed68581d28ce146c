// How much each transformer layer changes the residual stream on calibration text: the angular
// distance arccos(cos(h_in, h_out)) / π between the hidden state entering a run of layers and the
// one leaving it, averaged over tokens (ShortGPT's block influence for one layer; Gromov et al.'s
// criterion for a run of n). Layers that barely turn the stream are the ones structured pruning
// removes first.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace kvasir::compress {

struct LayerDistanceOptions {
  int64_t n_ctx = 512;
  int64_t max_chunks = 8;  // chunks of n_ctx tokens at most
  int64_t max_span = 1;    // runs of 1 .. max_span layers
  int num_threads = 0;
  int32_t bos = -1;  // replaces each chunk's first token when >= 0
  std::function<void(int64_t chunk, int64_t chunks)> on_chunk = {};
};

struct LayerDistances {
  int64_t n_layers = 0, max_span = 0, tokens = 0;
  std::vector<double> d;  // [span - 1][first layer]: NaN where the run would pass the last layer
  double at(int64_t first, int64_t span) const { return d[size_t((span - 1) * n_layers + first)]; }
};

Result<LayerDistances> layer_distances(const Model& model, std::span<const int32_t> tokens,
                                       const LayerDistanceOptions& options);

// The layers to remove, ascending: the `count` single layers of lowest distance (independent), or
// the run of `count` consecutive layers of lowest distance (contiguous; needs max_span >= count).
// The last layer is never chosen (it feeds the output head directly; Gromov et al. find removing it
// costs far more than its distance says).
std::vector<int64_t> layers_to_remove(const LayerDistances& d, int64_t count, bool contiguous);

}  // namespace kvasir::compress
