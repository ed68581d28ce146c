// GGUF (v2, v3): a pure parse over bytes, every number checked before use, and a writer.
// Layout: magic "GGUF", version u32, n_tensors u64, n_kv u64, key/values, tensor infos,
// padding to `general.alignment`, tensor data (offsets relative to the data section).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kvasir::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars live in the numeric fields; arrays hold `items` of `elem_type`.
struct Value {
  ValueType type = ValueType::U32;
  uint64_t u = 0;    // U8..U64, BOOL
  int64_t i = 0;     // I8..I64
  double f = 0;      // F32, F64
  std::string str;   // STRING
  ValueType elem_type = ValueType::U8;  // ARRAY
  std::vector<Value> items;             // ARRAY

  bool is_integer() const;
  bool is_float() const { return type == ValueType::F32 || type == ValueType::F64; }
  // Numeric value as a double / signed integer (for integers and floats).
  double as_f64() const;
  int64_t as_i64() const;
  std::string to_display(size_t max_items = 8) const;  // for `kvasir inspect`

  static Value of_u32(uint32_t v) { Value x; x.type = ValueType::U32; x.u = v; return x; }
  static Value of_i32(int32_t v) { Value x; x.type = ValueType::I32; x.i = v; return x; }
  static Value of_u64(uint64_t v) { Value x; x.type = ValueType::U64; x.u = v; return x; }
  static Value of_f32(float v) { Value x; x.type = ValueType::F32; x.f = v; return x; }
  static Value of_bool(bool v) { Value x; x.type = ValueType::BOOL; x.u = v; return x; }
  static Value of_string(std::string v) { Value x; x.type = ValueType::STRING; x.str = std::move(v); return x; }
  static Value of_array(ValueType elem, std::vector<Value> items) {
    Value x; x.type = ValueType::ARRAY; x.elem_type = elem; x.items = std::move(items); return x;
  }
};

struct KeyValue {
  std::string key;
  Value value;
};

inline constexpr int kMaxDims = 4;

struct TensorInfo {
  std::string name;
  int n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is the row length (contiguous)
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the parsed bytes

  int64_t num_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t num_rows() const { return ne[1] * ne[2] * ne[3]; }
};

struct File {
  uint32_t version = 3;
  std::vector<KeyValue> kv;
  std::vector<TensorInfo> tensors;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;

  const Value* find(std::string_view key) const;
  const TensorInfo* tensor(std::string_view name) const;

  // Typed getters: an error names the key and what was wrong.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;   // accepts integer values too
  Result<bool> get_bool(std::string_view key) const;
  Result<const Value*> get_array(std::string_view key, ValueType elem) const;

  std::unordered_map<std::string, size_t> kv_index;
  std::unordered_map<std::string, size_t> tensor_index;
};

struct Limits {
  uint64_t max_string = 1ull << 24;        // 16 MiB: no real key or token is longer
  uint64_t max_array = 1ull << 26;         // 64M elements
  uint64_t max_kv = 1ull << 20;
  uint64_t max_tensors = 1ull << 20;
  int max_nesting = 4;
};

// Parses and validates; `bytes` must outlive the result (tensor data points into it).
Result<File> parse(std::span<const uint8_t> bytes, const Limits& limits = {});

// Writes GGUF v3. Tensor data is padded to `alignment`.
class Writer {
 public:
  void set(std::string key, Value value);
  // `data` must hold row_bytes(type, ne[0]) * rows bytes. alignment must be a power of two <= 256.
  void add_tensor(std::string name, DType type, std::vector<int64_t> shape, std::vector<uint8_t> data);
  void remove(std::string_view key);
  // A tensor whose data write_streaming() asks for when its turn comes (memory: one tensor).
  void add_tensor_header(std::string name, DType type, std::vector<int64_t> shape);
  using TensorData = std::function<Result<std::vector<uint8_t>>(size_t index)>;
  Status write_streaming(const std::string& path, const TensorData& data_of, uint64_t alignment = 32) const;
  std::vector<uint8_t> to_bytes(uint64_t alignment = 32) const;
  std::vector<uint8_t> header_bytes(uint64_t alignment = 32) const;  // everything before the data
  Status write(const std::string& path, uint64_t alignment = 32) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
    uint64_t bytes = 0;
  };
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace kvasir::gguf
