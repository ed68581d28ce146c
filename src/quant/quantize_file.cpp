#include "quant/quantize_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"

namespace kvasir::quant {
namespace {

int64_t layer_of(const std::string& name) {
  int64_t layer = -1;
  if (name.rfind("blk.", 0) == 0) std::sscanf(name.c_str(), "blk.%lld.", reinterpret_cast<long long*>(&layer));
  return layer;
}

std::vector<int64_t> shape_of(const gguf::TensorInfo& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); }

}  // namespace

std::vector<PlannedTensor> plan_tensors(const gguf::File& in, const TensorRules& rules) {
  int64_t n_layers = 1, n_gqa = 1;
  if (const auto* arch = in.find("general.architecture")) {
    auto number = [&](const std::string& key) -> int64_t {
      const auto* v = in.find(arch->str + "." + key);
      if (!v) return 0;
      if (v->type == gguf::ValueType::ARRAY) return v->items.empty() || !v->items[0].is_integer() ? 0 : int64_t(v->items[0].as_f64());
      return v->is_integer() ? int64_t(v->as_f64()) : 0;
    };
    n_layers = std::max<int64_t>(1, number("block_count"));
    const int64_t heads = number("attention.head_count"), kv = number("attention.head_count_kv");
    if (heads > 0 && kv > 0) n_gqa = heads / kv;
  }
  // llama.cpp's order: tensors outside the layers first, then by layer, each group by name.
  std::vector<const gguf::TensorInfo*> order;
  bool has_output = false;
  for (const auto& t : in.tensors) order.push_back(&t), has_output = has_output || t.name == "output.weight";
  std::stable_sort(order.begin(), order.end(), [](const gguf::TensorInfo* a, const gguf::TensorInfo* b) {
    const int64_t la = layer_of(a->name), lb = layer_of(b->name);
    return la != lb ? la < lb : a->name < b->name;
  });
  std::vector<PlannedTensor> plan;
  for (const gguf::TensorInfo* t : order)
    plan.push_back({t, tensor_type(rules, {t->name, shape_of(*t), layer_of(t->name), n_layers, has_output, n_gqa})});
  return plan;
}

Status quantize_file(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o) {
  if (in_path == out_path) return Error{"the output must be another file than the input", ErrorCode::invalid_argument};
  auto file = MappedFile::open(in_path);
  if (!file) return Error{file.error()};
  auto parsed = gguf::parse(file->bytes());
  if (!parsed) return Error{in_path + ": " + parsed.error()};
  const gguf::File& in = *parsed;

  gguf::Writer w;
  for (const auto& kv : in.kv)
    if (kv.key != "general.file_type" && kv.key != "general.quantization_version" && kv.key != "general.alignment")
      w.set(kv.key, kv.value);
  w.set("general.quantization_version", gguf::Value::of_u32(2));
  w.set("general.file_type", gguf::Value::of_u32(o.rules.type.ftype));
  if (o.importance) {  // llama-quantize's keys, in its order (strings cut at 127 bytes)
    w.set("quantize.imatrix.file", gguf::Value::of_string(o.importance->file.substr(0, 127)));
    if (!o.importance->dataset.empty())
      w.set("quantize.imatrix.dataset", gguf::Value::of_string(o.importance->dataset.substr(0, 127)));
    w.set("quantize.imatrix.entries_count", gguf::Value::of_u32(uint32_t(o.importance->weights.size())));
    if (o.importance->chunks > 0) w.set("quantize.imatrix.chunks_count", gguf::Value::of_u32(o.importance->chunks));
  }
  for (const auto& [key, value] : o.extra_metadata) w.set(key, value);

  TensorRules rules = o.rules;
  rules.has_imatrix = o.importance.has_value();
  const std::vector<PlannedTensor> plan = plan_tensors(in, rules);
  std::vector<const gguf::TensorInfo*> order;
  for (const PlannedTensor& p : plan) order.push_back(p.tensor);
  std::vector<DType> target;
  std::vector<const float*> importance;  // per tensor: its weights, [n_mat][ne0], or null
  for (const PlannedTensor& p : plan) {
    const gguf::TensorInfo* t = p.tensor;
    const DType to = p.type;
    const float* imp = nullptr;
    const bool precomputed = o.precomputed && o.precomputed->count(t->name);
    if (o.importance && to != t->type && dtype_info(to).block_size > 1 && !precomputed) {
      auto it = o.importance->weights.find(t->name);
      if (it != o.importance->weights.end()) {
        if (it->second.size() != size_t(t->ne[0] * t->ne[2]))
          return Error{"the importance matrix has " + std::to_string(it->second.size()) + " weights for '" + t->name +
                           "', which needs " + std::to_string(t->ne[0] * t->ne[2]),
                       ErrorCode::invalid_argument};
        if (!kernels::weighted_quantizer(to) && to != DType::Q8_0)
          return Error{"tensor '" + t->name + "' gets " + std::string(dtype_name(to)) +
                           ", which kvasir cannot quantize with an importance matrix yet (Q4_0, Q4_1, Q5_0, Q5_1, "
                           "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_0 can; or leave the imatrix out)",
                       ErrorCode::invalid_argument};
        imp = it->second.data();
      }
    }
    importance.push_back(imp);
    const bool src_quantized = dtype_info(t->type).block_size > 1;
    if (src_quantized && to != t->type && !o.allow_requantize)
      return Error{"tensor '" + t->name + "' is already quantized (" + std::string(dtype_name(t->type)) +
                       "): requantizing loses quality; pass --allow-requantize to do it anyway",
                   ErrorCode::invalid_argument};
    if (to != t->type && (!kernels::quant_traits(to) || (to != DType::F32 && !kernels::quant_traits(to)->quantize_row)))
      return Error{"no quantizer for " + std::string(dtype_name(to)), ErrorCode::invalid_argument};
    target.push_back(to);
    w.add_tensor_header(t->name, to, shape_of(*t));
  }

  ThreadPool pool(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  auto data_of = [&](size_t i) -> Result<std::vector<uint8_t>> {
    const gguf::TensorInfo& t = *order[i];
    const DType to = target[i];
    if (o.progress) o.progress(i, order.size(), t.name, t.type, to);
    const int64_t n = t.ne[0];
    int64_t rows = 1;
    for (int d = 1; d < t.n_dims; ++d) rows *= t.ne[d];
    const size_t src_rb = row_bytes(t.type, n), dst_rb = row_bytes(to, n);
    const uint8_t* src = t.data;
    if (o.precomputed) {
      if (auto it = o.precomputed->find(t.name); it != o.precomputed->end()) {
        if (it->second.size() != dst_rb * size_t(rows))
          return Error{"tensor '" + t.name + "': the calibrated quantization has " + std::to_string(it->second.size()) +
                       " bytes, " + std::string(dtype_name(to)) + " needs " + std::to_string(dst_rb * size_t(rows))};
        return it->second;
      }
    }
    if (to == t.type) return std::vector<uint8_t>(src, src + src_rb * size_t(rows));
    std::vector<uint8_t> out(dst_rb * size_t(rows));
    const auto* from = kernels::quant_traits(t.type);
    const auto* into = kernels::quant_traits(to);
    if (!from) return Error{"tensor '" + t.name + "': cannot read type " + std::string(dtype_name(t.type))};
    const float* imp = importance[i];
    const kernels::QuantizeWeightedFn weighted = imp ? kernels::weighted_quantizer(to) : nullptr;
    const int64_t rows_per_matrix = t.n_dims >= 2 ? t.ne[1] : 1;  // experts: one weight row each
    pool.parallel_for(rows, 8, [&](int64_t b, int64_t e, int) {
      std::vector<float> row(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        from->dequantize_row(src + size_t(r) * src_rb, row.data(), n);
        uint8_t* y = out.data() + size_t(r) * dst_rb;
        if (to == DType::F32) std::memcpy(y, row.data(), size_t(n) * 4);
        else if (weighted) weighted(row.data(), y, n, imp + (r / rows_per_matrix) * n);
        else into->quantize_row(row.data(), y, n);
      }
    });
    return out;
  };
  return w.write_streaming(out_path, data_of, in.alignment);
}

}  // namespace kvasir::quant
