#include "compress/prune_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"
#include "model/config.h"

namespace kvasir::compress {

int64_t layer_of_tensor(const std::string& name) {
  if (!name.starts_with("blk.")) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return -1;
  int64_t v = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

namespace {

bool prunable(const gguf::TensorInfo& t) {
  return layer_of_tensor(t.name) >= 0 && t.n_dims >= 2 && t.name.ends_with(".weight") &&
         t.name.find("norm") == std::string::npos && t.name.find("ffn_gate_inp") == std::string::npos;
}

std::vector<int64_t> shape_of(const gguf::TensorInfo& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); }

// A tensor's rows in F32.
Result<std::vector<float>> to_f32(const gguf::TensorInfo& t, ThreadPool& pool) {
  const auto* tr = kernels::quant_traits(t.type);
  if (!tr) return Error{"tensor '" + t.name + "': cannot read type " + std::string(dtype_name(t.type))};
  const int64_t n = t.ne[0], rows = t.num_rows();
  const size_t rb = row_bytes(t.type, n);
  std::vector<float> w(size_t(n * rows));
  pool.parallel_for(rows, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) tr->dequantize_row(t.data + size_t(r) * rb, w.data() + r * n, n);
  });
  return w;
}

// Scores of a whole tensor: per matrix of a 3-D tensor, that matrix's column norms.
Result<std::vector<float>> scores_of(const gguf::TensorInfo& t, std::span<const float> w, const PruneOptions& o) {
  std::vector<float> s(w.size());
  const int64_t n = t.ne[0], rows_per_mat = t.ne[1], n_mat = t.num_rows() / t.ne[1];
  const calib::ImatrixEntry* entry = nullptr;
  if (o.unstructured->method == PruneMethod::wanda) {
    if (!o.imatrix) return Error{"Wanda needs an importance matrix (--imatrix FILE or -f TEXT)", ErrorCode::invalid_argument};
    auto it = o.imatrix->entries.find(t.name);
    if (it == o.imatrix->entries.end())
      return Error{"the importance matrix has no entry for '" + t.name + "'", ErrorCode::invalid_argument};
    entry = &it->second;
    if (entry->n_in() != n || int64_t(entry->counts.size()) != n_mat)
      return Error{"the importance matrix's entry for '" + t.name + "' does not match its shape", ErrorCode::invalid_argument};
  }
  std::vector<float> col(entry ? size_t(n) : 0);
  for (int64_t mat = 0; mat < n_mat; ++mat) {
    if (entry)
      for (int64_t j = 0; j < n; ++j) col[size_t(j)] = entry->mean(mat, j);
    const size_t off = size_t(mat * rows_per_mat * n), len = size_t(rows_per_mat * n);
    weight_scores(w.subspan(off, len), n, col, std::span<float>(s).subspan(off, len));
  }
  return s;
}

Status check_removal(const std::vector<int64_t>& remove, int64_t n_layers) {
  std::set<int64_t> seen;
  for (int64_t l : remove) {
    if (l < 0 || l >= n_layers)
      return Error{"layer " + std::to_string(l) + " does not exist (the model has " + std::to_string(n_layers) + ")",
                   ErrorCode::invalid_argument};
    if (!seen.insert(l).second) return Error{"layer " + std::to_string(l) + " is named twice", ErrorCode::invalid_argument};
  }
  if (int64_t(seen.size()) >= n_layers) return Error{"removing every layer leaves no model", ErrorCode::invalid_argument};
  return {};
}

}  // namespace

Result<PruneReport> prune_file(const std::string& in_path, const std::string& out_path, const PruneOptions& o) {
  if (in_path == out_path) return Error{"the output must be another file than the input", ErrorCode::invalid_argument};
  auto file = MappedFile::open(in_path);
  if (!file) return Error{file.error()};
  auto parsed = gguf::parse(file->bytes());
  if (!parsed) return Error{in_path + ": " + parsed.error()};
  const gguf::File& in = *parsed;
  auto config = config_from_gguf(in);
  if (!config) return Error{in_path + ": " + config.error()};
  const std::string& arch = config->arch_name;
  const int64_t n_layers = config->n_layers;
  if (auto s = check_removal(o.remove_layers, n_layers); !s) return Error{s.error(), s.error_code()};
  if (const auto& u = o.unstructured) {
    if (u->m > 0 && (u->n < 0 || u->n >= u->m))
      return Error{"an N:M pattern keeps fewer than M of every M (got " + std::to_string(u->n) + ":" + std::to_string(u->m) + ")",
                   ErrorCode::invalid_argument};
    if (u->m == 0 && !(u->sparsity >= 0 && u->sparsity < 1))
      return Error{"the sparsity must be in [0, 1)", ErrorCode::invalid_argument};
  }

  PruneReport report;
  report.layers_in = n_layers;
  report.removed_layers = o.remove_layers;
  std::sort(report.removed_layers.begin(), report.removed_layers.end());
  report.layers_out = n_layers - int64_t(report.removed_layers.size());
  std::vector<int64_t> new_index(size_t(n_layers), -1);
  for (int64_t l = 0, next = 0; l < n_layers; ++l)
    if (!std::binary_search(report.removed_layers.begin(), report.removed_layers.end(), l)) new_index[size_t(l)] = next++;

  // Metadata: what counts layers follows the kept ones.
  gguf::Writer w;
  const std::string prefix = arch + ".";
  for (const auto& kv : in.kv) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (!report.removed_layers.empty() && kv.key.starts_with(prefix)) {
      if (kv.key == prefix + "block_count") {
        v.u = uint64_t(report.layers_out), v.i = report.layers_out;
      } else if (v.type == gguf::ValueType::ARRAY && int64_t(v.items.size()) == n_layers) {
        std::vector<gguf::Value> kept;
        for (int64_t l = 0; l < n_layers; ++l)
          if (new_index[size_t(l)] >= 0) kept.push_back(v.items[size_t(l)]);
        v.items = std::move(kept);
      }
    }
    w.set(kv.key, std::move(v));
  }
  const std::string pattern_key = prefix + "attention.sliding_window_pattern";
  if (!report.removed_layers.empty() && config->sliding_window > 0 && !in.find(pattern_key)) {
    std::vector<gguf::Value> pattern;
    for (int64_t l = 0; l < n_layers; ++l)
      if (new_index[size_t(l)] >= 0) pattern.push_back(gguf::Value::of_bool(config->layer_is_swa[size_t(l)]));
    w.set(pattern_key, gguf::Value::of_array(gguf::ValueType::BOOL, std::move(pattern)));
  }
  if (!report.removed_layers.empty()) {
    std::vector<gguf::Value> removed;
    for (int64_t l : report.removed_layers) removed.push_back(gguf::Value::of_u32(uint32_t(l)));
    w.set("kvasir.prune.removed_layers", gguf::Value::of_array(gguf::ValueType::U32, std::move(removed)));
  }

  // Tensors: those of removed layers dropped, the others renumbered.
  struct Out {
    const gguf::TensorInfo* t;
    std::string name;
    int64_t layer;  // output layer, -1 outside the blocks
    bool prune;
  };
  std::vector<Out> outs;
  for (const auto& t : in.tensors) {
    const int64_t l = layer_of_tensor(t.name);
    if (l >= n_layers) return Error{"tensor '" + t.name + "' names a layer the model does not have"};
    if (l >= 0 && new_index[size_t(l)] < 0) continue;
    std::string name = l < 0 ? t.name : "blk." + std::to_string(new_index[size_t(l)]) + t.name.substr(t.name.find('.', 4));
    const bool prune = o.unstructured && prunable(t);
    if (prune) {
      if (dtype_info(t.type).block_size > 1 && !o.allow_requantize)
        return Error{"tensor '" + t.name + "' is quantized (" + std::string(dtype_name(t.type)) +
                         "): pruning dequantizes and quantizes it again; prune the float model, or pass --allow-requantize",
                     ErrorCode::invalid_argument};
      if (const auto* tr = kernels::quant_traits(t.type); !tr || (t.type != DType::F32 && !tr->quantize_row))
        return Error{"tensor '" + t.name + "': no quantizer for " + std::string(dtype_name(t.type))};
      if (o.unstructured->m > 0 && t.ne[0] % o.unstructured->m != 0)
        return Error{"tensor '" + t.name + "': rows of " + std::to_string(t.ne[0]) + " are not whole groups of " +
                         std::to_string(o.unstructured->m),
                     ErrorCode::invalid_argument};
    }
    outs.push_back({&t, std::move(name), l < 0 ? -1 : new_index[size_t(l)], prune});
    w.add_tensor_header(outs.back().name, t.type, shape_of(t));
  }
  for (const auto& t : in.tensors) report.bytes_in += t.nbytes;

  ThreadPool pool(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  // Scope layer / global: one threshold per group over every pruned tensor in it, found first.
  std::map<int64_t, Threshold> thresholds;  // by output layer; -2: the whole model
  const bool grouped = o.unstructured && o.unstructured->m == 0 &&
                       (o.unstructured->scope == PruneScope::layer || o.unstructured->scope == PruneScope::global);
  if (grouped) {
    std::map<int64_t, std::vector<float>> scores;
    for (const Out& x : outs) {
      if (!x.prune) continue;
      auto wf = to_f32(*x.t, pool);
      if (!wf) return Error{wf.error()};
      auto s = scores_of(*x.t, *wf, o);
      if (!s) return Error{s.error(), s.error_code()};
      auto& group = scores[o.unstructured->scope == PruneScope::global ? -2 : x.layer];
      group.insert(group.end(), s->begin(), s->end());
    }
    for (auto& [g, s] : scores) {
      const int64_t k = std::llround(o.unstructured->sparsity * double(s.size()));
      thresholds[g] = lowest_k_threshold(std::move(s), k);
    }
  }

  auto data_of = [&](size_t i) -> Result<std::vector<uint8_t>> {
    const Out& x = outs[i];
    const gguf::TensorInfo& t = *x.t;
    if (o.progress) o.progress(i, outs.size(), x.name);
    report.bytes_out += t.nbytes;
    if (!x.prune) return std::vector<uint8_t>(t.data, t.data + t.nbytes);
    auto wf = to_f32(t, pool);
    if (!wf) return Error{wf.error()};
    std::vector<float>& wv = *wf;
    auto s = scores_of(t, wv, o);
    if (!s) return Error{s.error(), s.error_code()};
    const Unstructured& u = *o.unstructured;
    const int64_t n = t.ne[0];
    if (u.m > 0) {
      pool.parallel_for(t.num_rows(), 16, [&](int64_t b, int64_t e, int) {
        const size_t off = size_t(b * n), len = size_t((e - b) * n);
        zero_n_of_m(std::span<float>(wv).subspan(off, len), std::span<const float>(*s).subspan(off, len), u.n, u.m);
      });
    } else if (grouped) {
      zero_below(wv, *s, thresholds[u.scope == PruneScope::global ? -2 : x.layer]);
    } else if (u.scope == PruneScope::matrix) {
      const int64_t per_mat = t.ne[0] * t.ne[1];
      for (size_t off = 0; off < wv.size(); off += size_t(per_mat))
        zero_lowest(std::span<float>(wv).subspan(off, size_t(per_mat)), std::span<const float>(*s).subspan(off, size_t(per_mat)),
                    std::llround(u.sparsity * double(per_mat)));
    } else {  // row
      pool.parallel_for(t.num_rows(), 16, [&](int64_t b, int64_t e, int) {
        const size_t off = size_t(b * n), len = size_t((e - b) * n);
        zero_lowest_per_row(std::span<float>(wv).subspan(off, len), std::span<const float>(*s).subspan(off, len), n, u.sparsity);
      });
    }
    // Back to the tensor's type; the zeros counted as they will be read.
    const auto* tr = kernels::quant_traits(t.type);
    const size_t rb = row_bytes(t.type, n);
    std::vector<uint8_t> bytes(t.nbytes);
    std::vector<int64_t> zeros(size_t(pool.num_threads()), 0);
    pool.parallel_for(t.num_rows(), 16, [&](int64_t b, int64_t e, int tid) {
      std::vector<float> back(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        uint8_t* y = bytes.data() + size_t(r) * rb;
        if (t.type == DType::F32) std::memcpy(y, wv.data() + r * n, rb);
        else tr->quantize_row(wv.data() + r * n, y, n);
        tr->dequantize_row(y, back.data(), n);
        zeros[size_t(tid)] += count_zeros(back);
      }
    });
    int64_t z = 0;
    for (int64_t v : zeros) z += v;
    report.tensors.push_back({x.name, x.layer, t.num_elements(), z});
    return bytes;
  };
  if (auto st = w.write_streaming(out_path, data_of); !st) return Error{st.error(), st.error_code()};
  return report;
}

}  // namespace kvasir::compress
