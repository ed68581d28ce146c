// GGUF parser: a bounds-checked cursor over bytes. Every count, length and offset is checked
// against what is left in the file before anything is allocated.
#include <algorithm>
#include <cstring>
#include <limits>

#include "format/gguf.h"

namespace kvasir::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian

class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> b) : b_(b) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return b_.size() - pos_; }

  template <typename T>
  bool read(T& out) {
    if (left() < sizeof(T)) return false;
    std::memcpy(&out, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool read_bytes(std::string& out, uint64_t n) {
    if (left() < n) return false;
    out.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> b_;
  uint64_t pos_ = 0;
};

Error err(const std::string& what, uint64_t offset) {
  return Error{"gguf: " + what + " (at byte offset " + std::to_string(offset) + ")"};
}

// Smallest encoded size of one value of this type (used to bound array counts).
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= 12; }

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const Limits& limits) : bytes_(bytes), c_(bytes), limits_(limits) {}

  Result<File> run();

 private:
  Status read_string(std::string& out, const std::string& what);
  Status read_value(Value& out, ValueType type, const std::string& key, int depth);
  Status read_kv(File& f);
  Status read_tensor_info(File& f, uint64_t index);
  Status place_tensors(File& f, uint64_t file_size, const uint8_t* base);

  std::span<const uint8_t> bytes_;
  Cursor c_;
  const Limits& limits_;
  uint32_t version_ = 0;
};

Status Parser::read_string(std::string& out, const std::string& what) {
  const uint64_t at = c_.pos();
  uint64_t n = 0;
  if (version_ == 1) {
    uint32_t n32 = 0;
    if (!c_.read(n32)) return err("truncated string length of " + what, at);
    n = n32;
  } else if (!c_.read(n)) {
    return err("truncated string length of " + what, at);
  }
  if (n > limits_.max_string) return err("string length " + std::to_string(n) + " of " + what + " is too large", at);
  if (n > c_.left()) return err("string of " + what + " runs past the end of the file", at);
  c_.read_bytes(out, n);
  return {};
}

Status Parser::read_value(Value& out, ValueType type, const std::string& key, int depth) {
  out.type = type;
  const uint64_t at = c_.pos();
  auto need = [&](bool ok) -> Status {
    if (!ok) return err("truncated value of key '" + key + "'", at);
    return {};
  };
  switch (type) {
    case ValueType::U8: { uint8_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.u = v; return {}; }
    case ValueType::U16: { uint16_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.u = v; return {}; }
    case ValueType::U32: { uint32_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.u = v; return {}; }
    case ValueType::U64: { uint64_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.u = v; return {}; }
    case ValueType::I8: { int8_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.i = v; return {}; }
    case ValueType::I16: { int16_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.i = v; return {}; }
    case ValueType::I32: { int32_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.i = v; return {}; }
    case ValueType::I64: { int64_t v = 0; if (auto s = need(c_.read(v)); !s) return s; out.i = v; return {}; }
    case ValueType::F32: { float v = 0; if (auto s = need(c_.read(v)); !s) return s; out.f = v; return {}; }
    case ValueType::F64: { double v = 0; if (auto s = need(c_.read(v)); !s) return s; out.f = v; return {}; }
    case ValueType::BOOL: {
      uint8_t v = 0;
      if (auto s = need(c_.read(v)); !s) return s;
      if (v > 1) return err("bool value " + std::to_string(v) + " of key '" + key + "' is not 0 or 1", at);
      out.u = v;
      return {};
    }
    case ValueType::STRING: return read_string(out.str, "value of key '" + key + "'");
    case ValueType::ARRAY: {
      if (depth >= limits_.max_nesting) return err("arrays nested too deeply in key '" + key + "'", at);
      uint32_t et = 0;
      if (!c_.read(et)) return err("truncated array type of key '" + key + "'", at);
      if (!valid_value_type(et)) return err("unknown array element type " + std::to_string(et) + " in key '" + key + "'", at);
      out.elem_type = static_cast<ValueType>(et);
      uint64_t n = 0;
      if (version_ == 1) {
        uint32_t n32 = 0;
        if (!c_.read(n32)) return err("truncated array length of key '" + key + "'", at);
        n = n32;
      } else if (!c_.read(n)) {
        return err("truncated array length of key '" + key + "'", at);
      }
      if (n > limits_.max_array) return err("array length " + std::to_string(n) + " of key '" + key + "' is too large", at);
      if (n > c_.left() / min_encoded_size(out.elem_type))
        return err("array of key '" + key + "' (" + std::to_string(n) + " elements) runs past the end of the file", at);
      out.items.resize(n);
      for (auto& item : out.items)
        if (auto s = read_value(item, out.elem_type, key, depth + 1); !s) return s;
      return {};
    }
  }
  return err("unknown value type of key '" + key + "'", at);
}

Status Parser::read_kv(File& f) {
  const uint64_t at = c_.pos();
  KeyValue kv;
  if (auto s = read_string(kv.key, "a metadata key"); !s) return s;
  uint32_t t = 0;
  if (!c_.read(t)) return err("truncated type of key '" + kv.key + "'", at);
  if (!valid_value_type(t)) return err("unknown value type " + std::to_string(t) + " of key '" + kv.key + "'", at);
  if (auto s = read_value(kv.value, static_cast<ValueType>(t), kv.key, 0); !s) return s;
  if (f.kv_index.count(kv.key)) return err("duplicate key '" + kv.key + "'", at);
  f.kv_index.emplace(kv.key, f.kv.size());
  f.kv.push_back(std::move(kv));
  return {};
}

Status Parser::read_tensor_info(File& f, uint64_t index) {
  const uint64_t at = c_.pos();
  TensorInfo t;
  if (auto s = read_string(t.name, "tensor #" + std::to_string(index) + " name"); !s) return s;
  const std::string where = "tensor '" + t.name + "'";
  uint32_t n_dims = 0;
  if (!c_.read(n_dims)) return err("truncated dims of " + where, at);
  if (n_dims == 0 || n_dims > kMaxDims) return err(where + " has " + std::to_string(n_dims) + " dims (1..4 allowed)", at);
  t.n_dims = int(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    if (version_ == 1) {
      uint32_t v = 0;
      if (!c_.read(v)) return err("truncated shape of " + where, at);
      ne = v;
    } else if (!c_.read(ne)) {
      return err("truncated shape of " + where, at);
    }
    if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()))
      return err(where + " has invalid dimension " + std::to_string(ne), at);
    t.ne[d] = int64_t(ne);
  }
  uint32_t type = 0;
  if (!c_.read(type)) return err("truncated type of " + where, at);
  const DTypeInfo* info = dtype_info(type);
  if (!info) return err(where + " has unsupported type " + std::to_string(type), at);
  t.type = info->type;
  if (!c_.read(t.offset)) return err("truncated offset of " + where, at);

  // Element count without overflow (bounded to 2^62).
  constexpr uint64_t kMaxElements = 1ull << 62;
  uint64_t count = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    if (uint64_t(t.ne[d]) > kMaxElements / count) return err("shape of " + where + " overflows", at);
    count *= uint64_t(t.ne[d]);
  }
  if (t.ne[0] % info->block_size != 0)
    return err(where + " row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                   std::string(info->name) + " block size " + std::to_string(info->block_size), at);
  const uint64_t blocks = count / uint64_t(info->block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) return err("byte size of " + where + " overflows", at);
  t.nbytes = blocks * info->block_bytes;
  if (f.tensor_index.count(t.name)) return err("duplicate tensor name '" + t.name + "'", at);
  f.tensor_index.emplace(t.name, f.tensors.size());
  f.tensors.push_back(std::move(t));
  return {};
}

Status Parser::place_tensors(File& f, uint64_t file_size, const uint8_t* base) {
  // Data section starts at the next multiple of the alignment.
  uint64_t pos = c_.pos();
  const uint64_t pad = (f.alignment - pos % f.alignment) % f.alignment;
  f.data_offset = pos + pad;
  if (f.tensors.empty()) return {};
  if (f.data_offset > file_size) return err("data section starts past the end of the file", pos);
  const uint64_t data_size = file_size - f.data_offset;

  std::vector<size_t> order(f.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (auto& t : f.tensors) {
    if (t.offset % f.alignment != 0)
      return err("tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not aligned to " +
                     std::to_string(f.alignment), f.data_offset);
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      return err("tensor '" + t.name + "' data (offset " + std::to_string(t.offset) + ", " +
                     std::to_string(t.nbytes) + " bytes) lies past the end of the file", f.data_offset + t.offset);
    t.data = base + f.data_offset + t.offset;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f.tensors[a].offset < f.tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = f.tensors[order[k - 1]];
    const auto& cur = f.tensors[order[k]];
    if (prev.offset + prev.nbytes > cur.offset)
      return err("tensors '" + prev.name + "' and '" + cur.name + "' overlap", f.data_offset + cur.offset);
  }
  return {};
}

Result<File> Parser::run() {
  File f;
  uint32_t magic = 0;
  if (!c_.read(magic)) return err("file too small for a GGUF header", 0);
  if (magic != kMagic) return err("bad magic (not a GGUF file)", 0);
  if (!c_.read(version_)) return err("truncated version", 4);
  if (version_ < 1 || version_ > 3) return err("unsupported GGUF version " + std::to_string(version_), 4);
  f.version = version_;
  uint64_t n_tensors = 0, n_kv = 0;
  if (version_ == 1) {
    uint32_t a = 0, b = 0;
    if (!c_.read(a) || !c_.read(b)) return err("truncated header", 8);
    n_tensors = a;
    n_kv = b;
  } else if (!c_.read(n_tensors) || !c_.read(n_kv)) {
    return err("truncated header", 8);
  }
  if (n_tensors > limits_.max_tensors) return err("tensor count " + std::to_string(n_tensors) + " is too large", 8);
  if (n_kv > limits_.max_kv) return err("metadata count " + std::to_string(n_kv) + " is too large", 16);
  // Each kv needs at least 12 bytes, each tensor info at least 24: bound the counts by the file size.
  if (n_kv > c_.left() / 12) return err("metadata count " + std::to_string(n_kv) + " exceeds the file size", 16);
  f.kv.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i)
    if (auto s = read_kv(f); !s) return Error{s.error()};
  if (n_tensors > c_.left() / 24) return err("tensor count " + std::to_string(n_tensors) + " exceeds the file size", 8);
  f.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i)
    if (auto s = read_tensor_info(f, i); !s) return Error{s.error()};

  if (const Value* a = f.find("general.alignment")) {
    if (!a->is_integer() || a->as_i64() <= 0 || (a->as_i64() & (a->as_i64() - 1)) != 0 || a->as_i64() > (1 << 20))
      return err("general.alignment must be a power of two integer", 0);
    f.alignment = uint64_t(a->as_i64());
  }
  if (auto s = place_tensors(f, bytes_.size(), bytes_.data()); !s) return Error{s.error()};
  return f;
}

}  // namespace

Result<File> parse(std::span<const uint8_t> bytes, const Limits& limits) {
  Parser p(bytes, limits);
  return p.run();
}

}  // namespace kvasir::gguf
