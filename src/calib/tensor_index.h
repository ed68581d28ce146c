// Which file tensor a weight Matrix views, found by address: fused tensors cut into row views
// (Phi-3's attn_qkv, gate|up) and the experts of a 3-D tensor map to their one tensor. What
// calibration statistics and calibrated quantizations are keyed by.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "format/gguf.h"
#include "model/weights.h"

namespace kvasir::calib {

struct TensorSlice {
  const gguf::TensorInfo* tensor;
  int64_t mat;        // which 2-D matrix of a 3-D tensor (0 otherwise)
  int64_t first_row;  // the view's first row, counting rows across the whole tensor
};

class TensorIndex {
 public:
  // The matrices of the transformer blocks, and output.weight when include_output.
  TensorIndex(const gguf::File& file, bool include_output);
  // Null when w views no indexed tensor (a tied output, a swapped-in copy).
  std::optional<TensorSlice> find(const Matrix& w) const;

 private:
  struct Range {
    const uint8_t* begin;
    const uint8_t* end;
    const gguf::TensorInfo* tensor;
  };
  std::vector<Range> ranges_;  // by address
};

}  // namespace kvasir::calib
