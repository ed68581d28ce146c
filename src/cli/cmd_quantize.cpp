// `kvasir quantize IN.gguf OUT.gguf TYPE [--pure] [--allow-requantize] [--output-tensor-type T]
// [--token-embedding-type T] [--tensor-type REGEX=TYPE ...] [-t N] [--max-kld X --eval-text FILE]`:
// llama-quantize's command line and output (RTN); the per-tensor rules are in quant/mix.h. With
// the quality gate, the result is measured against its source (mean KL divergence of the
// next-token distributions on the text, as `kvasir perplexity --kl-base`) before it is written,
// and refused (non-zero exit, nothing written) when the KLD exceeds X.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>
#include <unistd.h>

#include "cli/common.h"
#include "cli/commands.h"
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
  cmd->add_option("--imatrix", a->imatrix, "Importance matrix (kvasir imatrix's or llama-imatrix's file): weighted quantization as llama-quantize --imatrix (Q4_0, Q4_1, Q5_0, Q5_1 so far)");
  auto* gate = cmd->add_option("--max-kld", a->max_kld, "Quality gate: refuse (write nothing, exit 1) when the mean KL divergence from the input on --eval-text exceeds this")
                   ->check(CLI::Range(0.0, 1e9));
  auto* text = cmd->add_option("--eval-text", a->eval_text, "Text for the quality gate (held out: not a calibration text)");
  cmd->add_option("--eval-ctx", a->eval_ctx, "Chunk size of the quality gate's evaluation (default 512)")
      ->check(CLI::Range(int64_t(8), int64_t(1) << 16));
  gate->needs(text);
  text->needs(gate);
  cmd->callback([&handler, a] { handler = [a] { return run_quantize(*a); }; });
}

}  // namespace kvasir::cli
