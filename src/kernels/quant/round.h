// Rounding helpers shared by the reference quantizers; each mirrors ggml's exactly.
#pragma once
#include <cstdint>
#include <cstring>

namespace kvasir::kernels {

// Round to nearest, ties to even, by the float "magic number" trick ggml uses; valid for
// |v| <= 4194303. The add must not be fused with a preceding multiply (see ref files).
inline int nearest_int(float v) {
  const float t = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace kvasir::kernels
