// `kvasir quantize IN.gguf OUT.gguf TYPE [--pure] [--allow-requantize] [--output-tensor-type T]
// [--token-embedding-type T] [--tensor-type REGEX=TYPE ...] [-t N]`: llama-quantize's command
// line and output (RTN); the per-tensor rules are in quant/mix.h.
#include <chrono>
#include <cstdio>
#include <regex>
#include <unistd.h>

#include "cli/common.h"
#include "cli/commands.h"
#include "quant/quantize_file.h"

namespace kvasir::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type, output_type, embedding_type;
  std::vector<std::string> tensor_types;
  bool pure = false, allow_requantize = false;
  int threads = 0;
};

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
  if (std::rename(tmp.c_str(), a.out.c_str()) != 0) return fail("cannot rename " + tmp + " to " + a.out);
  std::fprintf(stderr, "%squantized %s -> %s (%s) in %.2f s\n", tty ? "\n" : "", a.in.c_str(), a.out.c_str(),
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
  cmd->callback([&handler, a] { handler = [a] { return run_quantize(*a); }; });
}

}  // namespace kvasir::cli
