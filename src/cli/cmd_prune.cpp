// `kvasir prune IN.gguf OUT.gguf`: weights zeroed by magnitude or Wanda (a sparsity per row,
// matrix, layer or model, or an N:M pattern such as 2:4), whole layers removed (chosen by their
// angular distance on a calibration text, or named) and/or FFN channels removed; then, with --eval, the pruned model's
// perplexity, KL divergence and same-top-1 against the input on held-out text.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "calib/imatrix.h"
#include "cli/common.h"
#include "cli/commands.h"
#include "compress/layer_importance.h"
#include "compress/prune_file.h"
#include "eval/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {
namespace {

struct PruneArgs {
  std::string in, out, method = "magnitude", scope, nm, calib_file, imatrix_file, eval_file;
  double sparsity = -1, ffn_keep = 1.0;
  int64_t remove_layers = 0, n_ctx = 512, calib_chunks = 8, eval_chunks = -1, heads_keep = 0;
  std::vector<int64_t> drop_layers;
  bool contiguous = false, allow_requantize = false, json = false;
  int threads = 0;
};

Result<compress::Unstructured> unstructured_of(const PruneArgs& a) {
  compress::Unstructured u;
  if (a.method == "magnitude") u.method = compress::PruneMethod::magnitude;
  else if (a.method == "wanda") u.method = compress::PruneMethod::wanda;
  else return Error{"--method takes magnitude or wanda, not '" + a.method + "'"};
  // Wanda compares the weights of one output (its paper's finding); magnitude those of a matrix.
  const std::string scope = !a.scope.empty() ? a.scope : u.method == compress::PruneMethod::wanda ? "row" : "matrix";
  if (scope == "row") u.scope = compress::PruneScope::row;
  else if (scope == "matrix") u.scope = compress::PruneScope::matrix;
  else if (scope == "layer") u.scope = compress::PruneScope::layer;
  else if (scope == "global") u.scope = compress::PruneScope::global;
  else return Error{"--scope takes row, matrix, layer or global, not '" + scope + "'"};
  if (!a.nm.empty()) {
    int n = 0, m = 0;
    char tail = 0;
    if (std::sscanf(a.nm.c_str(), "%d:%d%c", &n, &m, &tail) != 2 || m < 2 || m > 64 || n < 0 || n >= m)
      return Error{"--nm takes N:M with 0 <= N < M <= 64, e.g. 2:4, not '" + a.nm + "'"};
    if (a.sparsity >= 0) return Error{"--nm and --sparsity exclude each other"};
    u.n = n, u.m = m;
  } else {
    u.sparsity = a.sparsity;
  }
  return u;
}

int run_prune(PruneArgs a) {
  const bool unstructured = a.sparsity >= 0 || !a.nm.empty();
  if (!unstructured && a.remove_layers == 0 && a.drop_layers.empty() && a.ffn_keep >= 1.0 && a.heads_keep == 0)
    return fail("nothing to prune: give --sparsity S, --nm N:M, --remove-layers N, --drop-layers L,..., --ffn-keep F or --heads-keep H");
  if (a.remove_layers > 0 && !a.drop_layers.empty()) return fail("--remove-layers and --drop-layers exclude each other");
  compress::PruneOptions po{.ffn_keep = a.ffn_keep, .heads_keep = a.heads_keep, .allow_requantize = a.allow_requantize, .num_threads = a.threads};
  if (unstructured) {
    auto u = unstructured_of(a);
    if (!u) return fail(u.error());
    po.unstructured = *u;
  }
  const bool wanda = unstructured && po.unstructured->method == compress::PruneMethod::wanda;
  const bool needs_stats = wanda || a.ffn_keep < 1.0 || a.heads_keep > 0;  // activation statistics: an imatrix
  if ((a.remove_layers > 0 || (needs_stats && a.imatrix_file.empty())) && a.calib_file.empty())
    return fail(a.remove_layers > 0 ? "--remove-layers chooses layers on a calibration text: give -f TEXT"
                                    : std::string(wanda ? "Wanda" : a.ffn_keep < 1.0 ? "--ffn-keep" : "--heads-keep") +
                                          " needs activation statistics: give -f TEXT or --imatrix FILE");
  auto model = Model::load(a.in);
  if (!model) return fail(model.error());
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return fail(a.in + ": " + tok.error());
  const int32_t bos = tok->add_bos() ? tok->bos() : -1;
  const bool bar = isatty(STDERR_FILENO);
  nlohmann::ordered_json j;

  std::vector<int32_t> calib;
  if (!a.calib_file.empty()) {
    auto text = text_or_builtin(a.calib_file, "-f");
    if (!text) return fail(text.error());
    calib = tok->encode(*text);
  }
  // Structured: which layers.
  po.remove_layers = a.drop_layers;
  if (a.remove_layers > 0) {
    auto d = compress::layer_distances(**model, calib,
                                       {.n_ctx = a.n_ctx, .max_chunks = a.calib_chunks,
                                        .max_span = a.contiguous ? a.remove_layers : 1, .num_threads = a.threads, .bos = bos,
                                        .on_chunk = [&](int64_t c, int64_t n) {
                                          if (bar) std::fprintf(stderr, "\rlayer distances: chunk %lld/%lld ", (long long)c, (long long)n);
                                        }});
    if (bar) std::fprintf(stderr, "\r\033[K");
    if (!d) return fail(d.error());
    po.remove_layers = compress::layers_to_remove(*d, a.remove_layers, a.contiguous);
    if (po.remove_layers.empty())
      return fail("cannot remove " + std::to_string(a.remove_layers) + " of " + std::to_string(d->n_layers) +
                  " layers (the last layer always stays)");
    j["layer_distance"] = nlohmann::ordered_json::array();
    if (!a.json) std::printf("layer  angular distance (input -> output, %lld tokens)\n", (long long)d->tokens);
    for (int64_t l = 0; l < d->n_layers; ++l) {
      const bool gone = std::find(po.remove_layers.begin(), po.remove_layers.end(), l) != po.remove_layers.end();
      j["layer_distance"].push_back(d->at(l, 1));
      if (!a.json) std::printf("%5lld  %.4f%s\n", (long long)l, d->at(l, 1), gone ? "  removed" : "");
    }
    if (a.contiguous && !a.json)
      std::printf("run of %lld from layer %lld: distance %.4f\n", (long long)a.remove_layers, (long long)po.remove_layers[0],
                  d->at(po.remove_layers[0], a.remove_layers));
  }
  // Wanda and FFN channels: the columns' activation norms.
  calib::Imatrix imatrix;
  if (needs_stats) {
    if (!a.imatrix_file.empty()) {
      auto m = calib::read_imatrix(a.imatrix_file);
      if (!m) return fail(m.error());
      imatrix = std::move(*m);
    } else {
      auto m = calib::collect_imatrix(**model, calib,
                                      {.n_ctx = a.n_ctx, .max_chunks = a.calib_chunks, .num_threads = a.threads, .bos = bos,
                                       .dataset = a.calib_file});
      if (!m) return fail(m.error());
      imatrix = std::move(*m);
    }
    po.imatrix = &imatrix;
  }

  const auto t0 = std::chrono::steady_clock::now();
  if (bar)
    po.progress = [](size_t i, size_t n, const std::string& name) {
      std::fprintf(stderr, "\rprune: [%zu/%zu] %-40s", i + 1, n, name.c_str());
    };
  auto report = compress::prune_file(a.in, a.out, po);
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (!report) return fail(report.error());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Per output layer: weights of the pruned matrices and how many are zero.
  std::map<int64_t, std::pair<int64_t, int64_t>> per_layer;
  int64_t elements = 0, zeros = 0;
  for (const auto& t : report->tensors) {
    per_layer[t.layer].first += t.elements, per_layer[t.layer].second += t.zeros;
    elements += t.elements, zeros += t.zeros;
  }
  j["layers_in"] = report->layers_in;
  j["layers_out"] = report->layers_out;
  j["removed_layers"] = report->removed_layers;
  j["n_ff_in"] = report->n_ff_in;
  j["n_ff_out"] = report->n_ff_out;
  j["n_head_in"] = report->n_head_in;
  j["n_head_out"] = report->n_head_out;
  j["bytes_in"] = report->bytes_in;
  j["bytes_out"] = report->bytes_out;
  if (unstructured) {
    j["sparsity"] = elements ? double(zeros) / double(elements) : 0.0;
    j["layer_sparsity"] = nlohmann::ordered_json::array();
    for (const auto& [l, ez] : per_layer) j["layer_sparsity"].push_back(double(ez.second) / double(std::max<int64_t>(ez.first, 1)));
  }
  if (!a.json) {
    if (!report->removed_layers.empty()) {
      std::printf("removed layers:");
      for (int64_t l : report->removed_layers) std::printf(" %lld", (long long)l);
      std::printf(" (%lld -> %lld layers)\n", (long long)report->layers_in, (long long)report->layers_out);
    }
    if (report->n_head_out != report->n_head_in)
      std::printf("query heads: %lld -> %lld in every layer\n", (long long)report->n_head_in, (long long)report->n_head_out);
    if (report->n_ff_out != report->n_ff_in)
      std::printf("FFN channels: %lld -> %lld in every layer\n", (long long)report->n_ff_in, (long long)report->n_ff_out);
    if (unstructured) {
      std::printf("layer  zeroed of its matrices' weights\n");
      for (const auto& [l, ez] : per_layer)
        std::printf("%5lld  %6.2f%% of %lld\n", (long long)l, 100.0 * double(ez.second) / double(std::max<int64_t>(ez.first, 1)),
                    (long long)ez.first);
      std::printf("total  %6.2f%% of %lld\n", 100.0 * double(zeros) / double(std::max<int64_t>(elements, 1)), (long long)elements);
    }
    std::printf("%s: %.1f MB of tensors (was %.1f MB), %.1f s\n", a.out.c_str(), double(report->bytes_out) / 1e6,
                double(report->bytes_in) / 1e6, secs);
  }

  if (!a.eval_file.empty()) {
    auto text = text_or_builtin(a.eval_file, "--eval");
    if (!text) return fail(text.error());
    std::vector<int32_t> tokens = tok->encode(*text);
    if (a.eval_chunks > 0) tokens.resize(std::min(tokens.size(), size_t(a.eval_chunks * a.n_ctx)));
    auto pruned = Model::load(a.out);
    if (!pruned) return fail(pruned.error());
    auto r = eval::evaluate(**pruned, model->get(), tokens, {.n_ctx = a.n_ctx, .num_threads = a.threads, .bos = bos});
    if (!r) return fail(r.error());
    const eval::KlStats& k = *r->kl;
    j["eval"] = {{"tokens", k.count()}, {"ppl", r->ppl.ppl()}, {"base_ppl", k.base_ppl().ppl()}, {"kld", k.mean_kld()},
                 {"kld_p99", k.kld_quantile(0.99)}, {"same_top1", k.same_top1()}};
    if (!a.json)
      std::printf("held-out (%lld positions): PPL %.4f (input %.4f), KLD mean %.5f, p99 %.4f, same top-1 %.2f%%\n",
                  (long long)k.count(), r->ppl.ppl(), k.base_ppl().ppl(), k.mean_kld(), k.kld_quantile(0.99),
                  100 * k.same_top1());
  }
  if (a.json) std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace

void register_prune(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<PruneArgs>();
  auto* cmd = app.add_subcommand("prune", "Zero weights (magnitude, Wanda, N:M) and/or remove whole layers of a GGUF model");
  cmd->add_option("input", a->in, "Model to prune (a float one: F32/F16/BF16)")->required();
  cmd->add_option("output", a->out, "Pruned GGUF file")->required();
  cmd->add_option("--sparsity", a->sparsity, "Fraction of each group's weights zeroed")->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--method", a->method, "magnitude (|W|) or wanda (|W| x the input column's activation norm)");
  cmd->add_option("--scope", a->scope, "Comparison group: row (wanda's default), matrix (magnitude's), layer or global");
  cmd->add_option("--nm", a->nm, "N:M pattern instead of a sparsity: keep N of every M consecutive weights (2:4)");
  cmd->add_option("--remove-layers", a->remove_layers, "Remove this many layers, those that turn the hidden state least")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 10));
  cmd->add_option("--ffn-keep", a->ffn_keep, "Keep this fraction of every layer's FFN channels (by activation x weight norm)")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--contiguous", a->contiguous, "With --remove-layers: one run of consecutive layers (Gromov et al.)");
  cmd->add_option("--drop-layers", a->drop_layers, "Remove these layers (0-based, comma separated)")->delimiter(',');
  cmd->add_option("-f,--file", a->calib_file, "Calibration text (Wanda's statistics, the layers' distances)");
  cmd->add_option("--imatrix", a->imatrix_file, "Wanda's statistics from an importance matrix file instead");
  cmd->add_option("--calib-chunks", a->calib_chunks, "Calibration chunks at most (default 8)")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("-c,--ctx", a->n_ctx, "Chunk size in tokens (default 512)")->check(CLI::Range(int64_t(16), int64_t(1) << 16));
  cmd->add_option("--heads-keep", a->heads_keep,
                  "Query heads kept per KV group in every layer (by the attention output's activations x ||W_o||)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  cmd->add_option("--eval", a->eval_file, "Held-out text: the pruned model's PPL, KLD and same top-1 against the input");
  cmd->add_option("--eval-chunks", a->eval_chunks, "Held-out chunks at most (default: all)");
  cmd->add_flag("--allow-requantize", a->allow_requantize, "Prune a quantized model (dequantized, pruned, quantized again)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->callback([&handler, a] { handler = [a] { return run_prune(*a); }; });
}

}  // namespace kvasir::cli
