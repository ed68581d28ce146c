// GGUF v3 writer: metadata in insertion order, tensors padded to the alignment.
#include <cstdio>
#include <cstring>
#include <memory>

#include "format/gguf.h"

namespace kvasir::gguf {
namespace {

class Out {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (buf.size() % alignment) buf.push_back(0);
  }
  void put_value(const Value& v) {
    switch (v.type) {
      case ValueType::U8: put<uint8_t>(uint8_t(v.u)); break;
      case ValueType::I8: put<int8_t>(int8_t(v.i)); break;
      case ValueType::U16: put<uint16_t>(uint16_t(v.u)); break;
      case ValueType::I16: put<int16_t>(int16_t(v.i)); break;
      case ValueType::U32: put<uint32_t>(uint32_t(v.u)); break;
      case ValueType::I32: put<int32_t>(int32_t(v.i)); break;
      case ValueType::U64: put<uint64_t>(v.u); break;
      case ValueType::I64: put<int64_t>(v.i); break;
      case ValueType::F32: put<float>(float(v.f)); break;
      case ValueType::F64: put<double>(v.f); break;
      case ValueType::BOOL: put<uint8_t>(v.u ? 1 : 0); break;
      case ValueType::STRING: put_string(v.str); break;
      case ValueType::ARRAY:
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(v.items.size());
        for (const auto& item : v.items) put_value(item);
        break;
    }
  }
  std::vector<uint8_t> buf;
};

}  // namespace

void Writer::set(std::string key, Value value) {
  for (auto& kv : kv_)
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  kv_.push_back({std::move(key), std::move(value)});
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
  const uint64_t bytes = data.size();
  tensors_.push_back({std::move(name), type, std::move(shape), std::move(data), bytes});
}

void Writer::remove(std::string_view key) {
  std::erase_if(kv_, [&](const KeyValue& kv) { return kv.key == key; });
}

void Writer::add_tensor_header(std::string name, DType type, std::vector<int64_t> shape) {
  uint64_t rows = 1;
  for (size_t d = 1; d < shape.size(); ++d) rows *= uint64_t(shape[d]);
  const uint64_t bytes = row_bytes(type, shape.empty() ? 0 : shape[0]) * rows;
  tensors_.push_back({std::move(name), type, std::move(shape), {}, bytes});
}

Status Writer::write_streaming(const std::string& path, const TensorData& data_of, uint64_t alignment) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return Error{"cannot write '" + path + "'"};
  const auto header = header_bytes(alignment);
  if (std::fwrite(header.data(), 1, header.size(), f.get()) != header.size()) return Error{"short write to '" + path + "'"};
  static const uint8_t zeros[256] = {};
  for (size_t i = 0; i < tensors_.size(); ++i) {
    auto data = data_of(i);
    if (!data) return Error{data.error(), data.error_code()};
    if (data->size() != tensors_[i].bytes) return Error{"tensor '" + tensors_[i].name + "': wrong data size", ErrorCode::internal};
    const size_t pad = (alignment - data->size() % alignment) % alignment;
    if (std::fwrite(data->data(), 1, data->size(), f.get()) != data->size() || std::fwrite(zeros, 1, pad, f.get()) != pad)
      return Error{"short write to '" + path + "'"};
  }
  if (std::fflush(f.get()) != 0) return Error{"short write to '" + path + "'"};
  return {};
}

// Header, metadata and tensor infos, padded to the alignment: everything before the data.
std::vector<uint8_t> Writer::header_bytes(uint64_t alignment) const {
  Out o;
  o.put<uint32_t>(0x46554747);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  const bool has_alignment_key = alignment != 32;
  o.put<uint64_t>(kv_.size() + (has_alignment_key ? 1 : 0));
  if (has_alignment_key) {
    o.put_string("general.alignment");
    o.put<uint32_t>(static_cast<uint32_t>(ValueType::U32));
    o.put<uint32_t>(uint32_t(alignment));
  }
  for (const auto& item : kv_) {
    o.put_string(item.key);
    o.put<uint32_t>(static_cast<uint32_t>(item.value.type));
    o.put_value(item.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.put_string(t.name);
    o.put<uint32_t>(uint32_t(t.shape.size()));
    for (int64_t ne : t.shape) o.put<uint64_t>(uint64_t(ne));
    o.put<uint32_t>(static_cast<uint32_t>(t.type));
    o.put<uint64_t>(offset);
    offset += (t.bytes + alignment - 1) / alignment * alignment;
  }
  o.pad_to(alignment);
  return std::move(o.buf);
}

std::vector<uint8_t> Writer::to_bytes(uint64_t alignment) const {
  std::vector<uint8_t> out = header_bytes(alignment);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    while (out.size() % alignment) out.push_back(0);
  }
  return out;
}

Status Writer::write(const std::string& path, uint64_t alignment) const {
  // Streams tensor data straight to the file: a multi-GiB model is never duplicated in memory.
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return Error{"cannot write '" + path + "'"};
  const auto header = header_bytes(alignment);
  bool ok = std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  static const uint8_t zeros[256] = {};
  for (const auto& t : tensors_) {
    if (!ok) break;
    ok = std::fwrite(t.data.data(), 1, t.data.size(), f.get()) == t.data.size();
    const size_t pad = (alignment - t.data.size() % alignment) % alignment;
    ok = ok && std::fwrite(zeros, 1, pad, f.get()) == pad;
  }
  if (!ok || std::fflush(f.get()) != 0) return Error{"short write to '" + path + "'"};
  return {};
}

}  // namespace kvasir::gguf
