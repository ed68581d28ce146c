// Tensor element types as numbered in GGUF files (ggml_type), with their block geometry.
// The numeric kernels for each type live in kernels/quant; this table is plain data so that
// the file format layer can validate shapes without depending on kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvasir {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30,
};

struct DTypeInfo {
  DType type;
  std::string_view name;
  int64_t block_size;   // elements per block
  size_t block_bytes;   // bytes per block
};

inline constexpr int64_t kQK = 32;    // block size of the simple types
inline constexpr int64_t kQKK = 256;  // super-block size of the k-quants

inline constexpr DTypeInfo kDTypeTable[] = {
    {DType::F32, "F32", 1, 4},
    {DType::F16, "F16", 1, 2},
    {DType::BF16, "BF16", 1, 2},
    {DType::Q4_0, "Q4_0", kQK, 2 + kQK / 2},
    {DType::Q4_1, "Q4_1", kQK, 4 + kQK / 2},
    {DType::Q5_0, "Q5_0", kQK, 2 + 4 + kQK / 2},
    {DType::Q5_1, "Q5_1", kQK, 4 + 4 + kQK / 2},
    {DType::Q8_0, "Q8_0", kQK, 2 + kQK},
    {DType::Q8_1, "Q8_1", kQK, 4 + kQK},
    {DType::Q2_K, "Q2_K", kQKK, kQKK / 16 + kQKK / 4 + 2 + 2},
    {DType::Q3_K, "Q3_K", kQKK, kQKK / 8 + kQKK / 4 + 12 + 2},
    {DType::Q4_K, "Q4_K", kQKK, 2 + 2 + 12 + kQKK / 2},
    {DType::Q5_K, "Q5_K", kQKK, 2 + 2 + 12 + kQKK / 8 + kQKK / 2},
    {DType::Q6_K, "Q6_K", kQKK, kQKK / 2 + kQKK / 4 + kQKK / 16 + 2},
    {DType::Q8_K, "Q8_K", kQKK, 4 + kQKK + kQKK / 16 * 2},
};

// nullptr for a type kvasir does not know.
inline constexpr const DTypeInfo* dtype_info(uint32_t raw) {
  for (const auto& row : kDTypeTable)
    if (static_cast<uint32_t>(row.type) == raw) return &row;
  return nullptr;
}
inline constexpr const DTypeInfo& dtype_info(DType t) { return *dtype_info(static_cast<uint32_t>(t)); }
inline constexpr std::string_view dtype_name(DType t) { return dtype_info(t).name; }

// Bytes of one row of n elements; n must be a multiple of the block size.
inline constexpr size_t row_bytes(DType t, int64_t n) {
  const auto& info = dtype_info(t);
  return size_t(n / info.block_size) * info.block_bytes;
}

std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace kvasir
