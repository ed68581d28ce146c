// `kvasir quantize IN.gguf OUT.gguf TYPE [--pure] [--allow-requantize] [--output-tensor-type T]
// [--token-embedding-type T] [--tensor-type REGEX=TYPE ...] [-t N] [--max-kld X --eval-text FILE]`:
// llama-quantize's command line and output (RTN); the per-tensor rules are in quant/mix.h. With
// the quality gate, the result is measured against its source (mean KL divergence of the
// next-token distributions on the text, as `kvasir perplexity --kl-base`) before it is written,
// and refused (non-zero exit, nothing written) when the KLD exceeds X. `--method gptq|awq|awq-gptq
// --calib-text FILE` quantizes the block matrices with calibration (calib/calibrated_quantize.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>
#include <unistd.h>

#include "cli/common.h"
#include "cli/commands.h"
#include "calib/calibrated_quantize.h"
#include "calib/imatrix.h"
#include "eval/perplexity.h"
#include "quant/quantize_file.h"

namespace kvasir::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type, output_type, embedding_type, imatrix;
  std::vector<std::string> tensor_types;
  bool pure = false, allow_requantize = false;
  int threads = 0;
  double max_kld = -1;  // < 0: no gate
  std::string method = "rtn", calib_text;
  int64_t calib_ctx = 512, calib_chunks = -1;
  quant::GptqOptions gptq;
  quant::AwqOptions awq;
  std::string eval_text;
  int64_t eval_ctx = 512;
};

// The quality gate: the quantized file against its source on the evaluation text. Prints the
// report; an error when the KLD is over the limit or cannot be measured.
Status check_quality(const QuantizeArgs& a, const std::string& quantized) {
  std::ifstream in(a.eval_text, std::ios::binary);
  if (!in) return Error{"--eval-text: cannot read " + a.eval_text};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto source = Model::load(a.in);
  if (!source) return Error{source.error()};
  auto q = Model::load(quantized);
  if (!q) return Error{q.error()};
  auto tok = Tokenizer::from_gguf((*source)->gguf());
  if (!tok) return Error{a.in + ": " + tok.error()};
  auto r = eval::evaluate(**q, source->get(), tok->encode(text),
                          {.n_ctx = a.eval_ctx, .num_threads = a.threads, .bos = tok->add_bos() ? tok->bos() : -1});
  if (!r) return Error{"quality gate: " + r.error()};
  const eval::KlStats& k = *r->kl;
  const bool pass = k.mean_kld() <= a.max_kld;
  std::fprintf(stderr,
               "quality gate: mean KLD %.6f (limit %.6f), p99 %.6f, same top-1 %.2f%%, PPL %.4f (source %.4f), %lld tokens "
               "scored: %s\n",
               k.mean_kld(), a.max_kld, k.kld_quantile(0.99), 100 * k.same_top1(), r->ppl.ppl(), k.base_ppl().ppl(),
               (long long)r->ppl.count, pass ? "pass" : "REFUSED");
  if (!pass) return Error{"the quantization's mean KLD " + std::to_string(k.mean_kld()) + " exceeds --max-kld; nothing written"};
  return {};
}

Result<std::string> read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{std::string(what) + ": cannot read " + path};
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// GPTQ / AWQ: the block matrices quantized layer by layer on the calibration text
// (calib/calibrated_quantize.h); what it returns is written by quantize_file, with every other
// tensor quantized as RTN would.
Result<std::map<std::string, std::vector<uint8_t>>> run_calibrated(const QuantizeArgs& a, quant::QuantizeOptions& o) {
  auto text = read_text(a.calib_text, "--calib-text");
  if (!text) return Error{text.error()};
  auto model = Model::load(a.in);
  if (!model) return Error{model.error()};
  quant::TensorRules rules = o.rules;
  rules.has_imatrix = o.importance.has_value();
  std::map<std::string, DType> target;
  for (const quant::PlannedTensor& p : quant::plan_tensors((*model)->gguf(), rules)) {
    if (dtype_info(p.tensor->type).block_size > 1 && p.type != p.tensor->type && !a.allow_requantize)
      return Error{"tensor '" + p.tensor->name + "' is already quantized (" + std::string(dtype_name(p.tensor->type)) +
                   "): requantizing loses quality; pass --allow-requantize to do it anyway"};
    target[p.tensor->name] = p.type;
  }
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return Error{a.in + ": " + tok.error()};
  const auto tokens = tok->encode(*text);
  const auto t0 = std::chrono::steady_clock::now();
  const calib::Method method = a.method == "gptq" ? calib::Method::gptq
                              : a.method == "awq" ? calib::Method::awq
                                                  : calib::Method::awq_gptq;
  calib::CalibratedOptions g{.method = method, .n_ctx = a.calib_ctx, .max_chunks = a.calib_chunks,
                             .num_threads = a.threads, .bos = tok->add_bos() ? tok->bos() : -1, .gptq = a.gptq,
                             .awq = a.awq, .target = [&target](const std::string& name) {
                               auto it = target.find(name);
                               return it == target.end() ? DType::F32 : it->second;
                             }};
  const bool tty = isatty(fileno(stderr));
  g.on_layer = [tty, t0](int64_t done, int64_t layers) {
    if (tty) std::fprintf(stderr, "\rcalibrating: layer %lld/%lld, %.0f s   ", (long long)done, (long long)layers,
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  auto r = calib::calibrated_quantize(**model, tokens, g);
  if (!r) return Error{a.method + ": " + r.error(), r.error_code()};
  if (tty) std::fprintf(stderr, "\n");
  std::string alphas;
  if (!r->awq_alphas.empty()) {
    std::vector<double> sorted = r->awq_alphas;
    std::sort(sorted.begin(), sorted.end());
    alphas = ", AWQ: " + std::to_string(sorted.size()) + " inputs scaled, median alpha " +
             std::to_string(sorted[sorted.size() / 2]).substr(0, 4);
  }
  std::fprintf(stderr, "%s: %zu tensors from %lld chunks of %lld tokens in %.1f s%s\n", a.method.c_str(), r->tensors.size(),
               (long long)r->chunks, (long long)a.calib_ctx,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), alphas.c_str());
  o.extra_metadata.push_back({"quantize.method", gguf::Value::of_string(a.method)});
  o.extra_metadata.push_back({"quantize.calibration.dataset", gguf::Value::of_string(a.calib_text.substr(0, 127))});
  o.extra_metadata.push_back({"quantize.calibration.chunks_count", gguf::Value::of_u32(uint32_t(r->chunks))});
  return std::move(r->tensors);
}

Result<DType> tensor_dtype(const std::string& name) {
  auto f = quant::file_type(name);
  if (!f) return Error{f.error()};
  return f->base;
}

int run_quantize(const QuantizeArgs& a) {
  auto ft = quant::file_type(a.type);
  if (!ft) return fail(ft.error());
  quant::QuantizeOptions o;
  o.rules.type = *ft;
  o.rules.pure = a.pure;
  o.allow_requantize = a.allow_requantize;
  o.num_threads = a.threads;
  if (!a.output_type.empty()) {
    auto t = tensor_dtype(a.output_type);
    if (!t) return fail("--output-tensor-type: " + t.error());
    o.rules.output_type = *t;
  }
  if (!a.embedding_type.empty()) {
    auto t = tensor_dtype(a.embedding_type);
    if (!t) return fail("--token-embedding-type: " + t.error());
    o.rules.token_embedding_type = *t;
  }
  for (const std::string& spec : a.tensor_types) {
    const size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0) return fail("--tensor-type wants REGEX=TYPE, got '" + spec + "'");
    try {
      std::regex check(spec.substr(0, eq));
    } catch (const std::regex_error&) {
      return fail("--tensor-type: '" + spec.substr(0, eq) + "' is not a regular expression");
    }
    auto t = tensor_dtype(spec.substr(eq + 1));
    if (!t) return fail("--tensor-type: " + t.error());
    o.rules.overrides.push_back({spec.substr(0, eq), *t});
  }
  if (!a.imatrix.empty()) {
    auto m = calib::read_imatrix(a.imatrix);
    if (!m) return fail("--imatrix: " + m.error());
    quant::Importance imp{.file = a.imatrix, .dataset = m->datasets.empty() ? "" : m->datasets[0], .chunks = m->chunk_count};
    for (const auto& [name, e] : m->entries) imp.weights[name] = e.quantize_weights();
    std::fprintf(stderr, "quantize: %zu importance matrix entries from %s (%u chunks)\n", imp.weights.size(),
                 a.imatrix.c_str(), imp.chunks);
    o.importance = std::move(imp);
  }
  const bool tty = isatty(fileno(stderr));
  o.progress = [tty](size_t i, size_t n, const std::string& name, DType from, DType to) {
    if (tty) std::fprintf(stderr, "\r[%zu/%zu] %-40s %s -> %s   ", i + 1, n, name.c_str(), std::string(dtype_name(from)).c_str(),
                          std::string(dtype_name(to)).c_str());
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, std::vector<uint8_t>> calibrated;
  if (a.method != "rtn") {
    auto r = run_calibrated(a, o);
    if (!r) return fail(r.error());
    calibrated = std::move(*r);
    o.precomputed = &calibrated;
  }
  const std::string tmp = a.out + ".tmp";
  if (auto s = quant::quantize_file(a.in, tmp, o); !s) {
    std::remove(tmp.c_str());
    return fail(s.error());
  }
  if (tty) std::fprintf(stderr, "\n");
  if (a.max_kld >= 0) {
    if (auto s = check_quality(a, tmp); !s) {
      std::remove(tmp.c_str());
      return fail(s.error());
    }
  }
  if (std::rename(tmp.c_str(), a.out.c_str()) != 0) return fail("cannot rename " + tmp + " to " + a.out);
  std::fprintf(stderr, "quantized %s -> %s (%s) in %.2f s\n", a.in.c_str(), a.out.c_str(),
               ft->name.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace

void register_quantize(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* cmd = app.add_subcommand("quantize", "Quantize a GGUF model to another type (llama-quantize's types and mixes)");
  cmd->add_option("input", a->in, "Input GGUF")->required();
  cmd->add_option("output", a->out, "Output GGUF")->required();
  cmd->add_option("type", a->type, "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k")->required();
  cmd->add_flag("--pure", a->pure, "Every matrix in the type (no output / attn_v / ffn_down upgrades)");
  cmd->add_flag("--allow-requantize", a->allow_requantize, "Allow an already quantized input");
  cmd->add_option("--output-tensor-type", a->output_type, "Type of output.weight");
  cmd->add_option("--token-embedding-type", a->embedding_type, "Type of token_embd.weight");
  cmd->add_option("--tensor-type", a->tensor_types, "REGEX=TYPE for the tensors whose names match (repeatable)");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->add_option("--imatrix", a->imatrix, "Importance matrix (kvasir imatrix's or llama-imatrix's file): weighted quantization as llama-quantize --imatrix (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K)");
  auto* gate = cmd->add_option("--max-kld", a->max_kld, "Quality gate: refuse (write nothing, exit 1) when the mean KL divergence from the input on --eval-text exceeds this")
                   ->check(CLI::Range(0.0, 1e9));
  auto* text = cmd->add_option("--eval-text", a->eval_text, "Text for the quality gate (held out: not a calibration text)");
  cmd->add_option("--eval-ctx", a->eval_ctx, "Chunk size of the quality gate's evaluation (default 512)")
      ->check(CLI::Range(int64_t(8), int64_t(1) << 16));
  gate->needs(text);
  text->needs(gate);
  cmd->add_option("--method", a->method,
                  "rtn (round to nearest, the default), gptq, awq or awq-gptq (AWQ's scaling, then GPTQ); the last three need --calib-text")
      ->check(CLI::IsMember({"rtn", "gptq", "awq", "awq-gptq"}));
  cmd->add_option("--calib-text", a->calib_text, "Calibration text for --method gptq/awq/awq-gptq (not the evaluation text)");
  cmd->add_option("--calib-ctx", a->calib_ctx, "Calibration chunk size in tokens (default 512)")
      ->check(CLI::Range(int64_t(16), int64_t(1) << 16));
  cmd->add_option("--calib-chunks", a->calib_chunks, "Calibration chunks to use (default: all whole chunks of the text)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--gptq-damp", a->gptq.damp, "GPTQ dampening, a fraction of the Hessian's mean diagonal (default 0.01)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--gptq-block", a->gptq.block, "GPTQ lazy-update block in columns (default 128)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--awq-grid", a->awq.grid, "AWQ: points of the scale exponent's grid over [0, 1) (default 20)")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--act-order", a->gptq.act_order, "GPTQ: quantize columns in decreasing activation order (scales fixed up front)");
  cmd->add_flag("!--gptq-plain-scales", a->gptq.weighted_scales,
                "GPTQ: choose block scales by plain rounding, not weighted by the Hessian's diagonal");
  cmd->callback([&handler, a] {
    handler = [a] {
      if ((a->method != "rtn") != !a->calib_text.empty())
        return fail(a->method != "rtn" ? "--method " + a->method + " needs --calib-text FILE"
                                       : std::string("--calib-text is for --method gptq, awq or awq-gptq"));
      return run_quantize(*a);
    };
  });
}

}  // namespace kvasir::cli
