// `kvasir perplexity -m MODEL -f TEXT [-c 512] [--kl-base BASE.gguf] [--json]`: llama.cpp's
// perplexity (chunks of -c tokens, BOS first, the second half of each chunk scored); with
// --kl-base, the KL divergence of MODEL's next-token distributions from BASE's, evaluated side by
// side, reported in the shape of llama-perplexity's --kl-divergence report.
#include <algorithm>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cli/common.h"
#include "cli/commands.h"
#include "eval/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {
namespace {

struct PerplexityArgs {
  std::string model, text_file, kl_base;
  int64_t n_ctx = 512, max_chunks = 0;  // 0: the whole text
  int threads = 0;
  bool json = false;
  std::string kv_type = "f16", base_kv_type = "f16";
  bool kv_no_rotate = false, kv_no_calibrate = false;
};

int run_perplexity(PerplexityArgs a) {
  a.model = model_path(a.model);
  std::ifstream in(a.text_file, std::ios::binary);
  if (!in) return fail("cannot read " + a.text_file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto model = Model::load(a.model);
  if (!model) return fail(model.error());
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return fail(a.model + ": " + tok.error());
  std::unique_ptr<Model> base;
  if (!a.kl_base.empty()) {
    auto b = Model::load(a.kl_base);
    if (!b) return fail(b.error());
    auto btok = Tokenizer::from_gguf((*b)->gguf());
    if (!btok) return fail(a.kl_base + ": " + btok.error());
    if (btok->n_vocab() != tok->n_vocab() || btok->encode(text) != tok->encode(text))
      return fail("--kl-base tokenizes the text differently: the models must share a vocabulary");
    base = std::move(*b);
  }
  auto kv_type = parse_kv_type(a.kv_type);
  if (!kv_type) return fail(kv_type.error());
  auto base_kv_type = parse_kv_type(a.base_kv_type);
  if (!base_kv_type) return fail(base_kv_type.error());
  std::vector<int32_t> tokens = tok->encode(text);
  if (a.max_chunks > 0) tokens.resize(std::min(tokens.size(), size_t(a.max_chunks * a.n_ctx)));
  // On the built-in text, never on the text scored.
  auto kv_transform = calibrate_kv_cache(**model, *tok, *kv_type, a.n_ctx, "", a.threads, !a.kv_no_calibrate);
  if (!kv_transform) return fail(kv_transform.error());
  const auto t0 = std::chrono::steady_clock::now();
  const bool bar = isatty(STDERR_FILENO);  // a progress line on a terminal only
  auto progress = [&](int64_t done, int64_t total, double ppl) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\rperplexity: chunk %lld/%lld, PPL so far %.4f, %.0f s left  ", (long long)done, (long long)total,
                 ppl, secs / double(done) * double(total - done));
  };
  auto r = eval::evaluate(**model, base.get(), tokens,
                          {.n_ctx = a.n_ctx, .num_threads = a.threads, .bos = tok->add_bos() ? tok->bos() : -1,
                           .kv_type = *kv_type, .base_kv_type = *base_kv_type, .kv_rotate_k = !a.kv_no_rotate,
                           .kv_transform = *kv_transform,
                           .on_chunk = bar ? std::function<void(int64_t, int64_t, double)>(progress) : nullptr});
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (!r) return fail(r.error());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const eval::PerplexityStats& p = r->ppl;
  if (a.json) {
    nlohmann::ordered_json j{{"tokens", tokens.size()}, {"n_ctx", a.n_ctx}, {"chunks", r->plan.n_chunks},
                             {"scored", p.count}, {"ppl", p.ppl()}, {"ppl_error", p.ppl_error()}, {"seconds", secs}};
    if (r->kl) {
      const eval::KlStats& k = *r->kl;
      j["base_ppl"] = k.base_ppl().ppl();
      j["kld"] = {{"mean", k.mean_kld()}, {"median", k.kld_quantile(0.5)}, {"p99", k.kld_quantile(0.99)},
                  {"max", k.kld_quantile(1.0)}};
      j["same_top1"] = k.same_top1();
      j["delta_p"] = {{"mean", k.mean_delta_p()}, {"rms", k.rms_delta_p()}};
      j["delta_ppl"] = p.ppl() - k.base_ppl().ppl();
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%zu tokens, %lld chunks of %lld, %lld scored, %.1f s\n", tokens.size(), (long long)r->plan.n_chunks,
              (long long)a.n_ctx, (long long)p.count, secs);
  if (!r->kl) {
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", p.ppl(), p.ppl_error());
    return 0;
  }
  const eval::KlStats& k = *r->kl;
  std::printf("====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", p.ppl(), p.ppl_error());
  std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", k.base_ppl().ppl(), k.base_ppl().ppl_error());
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f\n", p.ppl() / k.base_ppl().ppl());
  std::printf("Mean PPL(Q)-PPL(base)         : %10.6f\n", p.ppl() - k.base_ppl().ppl());
  std::printf("\n====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f\n", k.mean_kld());
  std::printf("Maximum KLD: %10.6f\n", k.kld_quantile(1.0));
  std::printf("99.0%%   KLD: %10.6f\n", k.kld_quantile(0.99));
  std::printf("Median  KLD: %10.6f\n", k.kld_quantile(0.5));
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("Mean    Δp: %8.3f %%\n", 100 * k.mean_delta_p());
  std::printf("RMS Δp    : %8.3f %%\n", 100 * k.rms_delta_p());
  std::printf("Same top p: %8.3f %%\n", 100 * k.same_top1());
  return 0;
}

}  // namespace

void register_perplexity(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<PerplexityArgs>();
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model on a text (llama.cpp's method), or its KL divergence from a base model");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("-f,--file", a->text_file, "Text file")->required();
  cmd->add_option("-c,--ctx", a->n_ctx, "Chunk size in tokens")->check(CLI::Range(int64_t(8), int64_t(1) << 16));
  cmd->add_option("--chunks", a->max_chunks, "Score the text's first N chunks only (default: all)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--kl-base", a->kl_base, "Reference model: report the KL divergence from it (same vocabulary)");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->add_option("--kv-type", a->kv_type, "The model's KV cache type: f16, f32, q8_0 or q4_0 (with the same file as "
                                          "--kl-base: the KV type's own KL divergence)");
  cmd->add_option("--kl-base-kv-type", a->base_kv_type, "The base model's KV cache type (default f16)");
  cmd->add_flag("--kv-no-rotate", a->kv_no_rotate, "Store 4-bit K and V unrotated");
  cmd->add_flag("--kv-no-calibrate", a->kv_no_calibrate, "Store quantized K and V as they are (no KV calibration)");
  cmd->callback([&handler, a] { handler = [a] { return run_perplexity(*a); }; });
}

}  // namespace kvasir::cli
