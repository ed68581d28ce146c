#include "calib/tensor_index.h"

#include <algorithm>

namespace kvasir::calib {

TensorIndex::TensorIndex(const gguf::File& file, bool include_output) {
  for (const gguf::TensorInfo& t : file.tensors) {
    if (t.n_dims < 2) continue;
    if (!(t.name.starts_with("blk.") || (include_output && t.name == "output.weight"))) continue;
    ranges_.push_back({t.data, t.data + t.nbytes, &t});
  }
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
}

std::optional<TensorSlice> TensorIndex::find(const Matrix& w) const {
  const auto* p = static_cast<const uint8_t*>(w.data);
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), p, [](const uint8_t* v, const Range& r) { return v < r.begin; });
  if (it == ranges_.begin()) return std::nullopt;
  const Range& r = *std::prev(it);
  const gguf::TensorInfo& t = *r.tensor;
  if (p >= r.end || t.ne[0] != w.n_in || t.type != w.type) return std::nullopt;
  const uint64_t row = uint64_t(p - r.begin) / row_bytes(t.type, t.ne[0]);
  return TensorSlice{&t, int64_t(row / uint64_t(t.ne[1])), int64_t(row)};
}

}  // namespace kvasir::calib
