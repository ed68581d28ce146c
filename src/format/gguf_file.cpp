// Metadata accessors and display of parsed GGUF files.
#include <cstdio>

#include "format/gguf.h"

namespace kvasir::gguf {

std::string_view value_type_name(ValueType t) {
  static constexpr std::string_view names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                               "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(names) ? names[i] : "?";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
    case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64: return true;
    default: return false;
  }
}

double Value::as_f64() const {
  if (is_float()) return f;
  if (type == ValueType::I8 || type == ValueType::I16 || type == ValueType::I32 || type == ValueType::I64) return double(i);
  return double(u);
}

int64_t Value::as_i64() const {
  if (type == ValueType::I8 || type == ValueType::I16 || type == ValueType::I32 || type == ValueType::I64) return i;
  if (is_float()) return int64_t(f);
  return u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
}

std::string Value::to_display(size_t max_items) const {
  switch (type) {
    case ValueType::STRING: {
      std::string s = str.size() > 120 ? str.substr(0, 120) + "..." : str;
      std::string out = "\"";
      for (char c : s) {
        if (c == '\n') out += "\\n";
        else if (c == '"') out += "\\\"";
        else out += c;
      }
      return out + "\"";
    }
    case ValueType::BOOL: return u ? "true" : "false";
    case ValueType::F32: case ValueType::F64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", f);
      return buf;
    }
    case ValueType::ARRAY: {
      std::string out = "[";
      for (size_t k = 0; k < items.size() && k < max_items; ++k) out += (k ? ", " : "") + items[k].to_display(max_items);
      if (items.size() > max_items) out += ", ... (" + std::to_string(items.size()) + " items)";
      return out + "]";
    }
    default: return is_integer() && (type == ValueType::I8 || type == ValueType::I16 || type == ValueType::I32 ||
                                      type == ValueType::I64) ? std::to_string(i) : std::to_string(u);
  }
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index.find(std::string(key));
  return it == kv_index.end() ? nullptr : &kv[it->second].value;
}

const TensorInfo* File::tensor(std::string_view name) const {
  auto it = tensor_index.find(std::string(name));
  return it == tensor_index.end() ? nullptr : &tensors[it->second];
}

namespace {
Error missing(std::string_view key) { return Error{"gguf: missing key '" + std::string(key) + "'"}; }
Error wrong(std::string_view key, const Value& v, std::string_view want) {
  return Error{"gguf: key '" + std::string(key) + "' has type " + std::string(value_type_name(v.type)) + ", expected " +
               std::string(want)};
}
}  // namespace

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::STRING) return wrong(key, *v, "string");
  return v->str;
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (!v->is_integer()) return wrong(key, *v, "integer");
  return v->as_i64();
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (!v->is_integer() && !v->is_float()) return wrong(key, *v, "number");
  return v->as_f64();
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::BOOL) return wrong(key, *v, "bool");
  return v->u != 0;
}

Result<const Value*> File::get_array(std::string_view key, ValueType elem) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::ARRAY || v->elem_type != elem)
    return wrong(key, *v, "array of " + std::string(value_type_name(elem)));
  return v;
}

}  // namespace kvasir::gguf
