// `kvasir imatrix -m MODEL -f TEXT -o FILE [-c 512] [--chunks N] [--process-output]`: the
// importance matrix of a calibration text, as llama-imatrix computes it and in its file format
// (GGUF), for `llama-quantize --imatrix` and kvasir's own quantizer. `kvasir imatrix --show FILE`
// summarizes a file (kvasir's or llama-imatrix's, GGUF or the older .dat).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "calib/imatrix.h"
#include "cli/common.h"
#include "cli/commands.h"

namespace kvasir::cli {
namespace {

struct ImatrixArgs {
  std::string model, text_file, out = "imatrix.gguf", show;
  int64_t n_ctx = 512, chunks = -1;
  bool process_output = false;
  int threads = 0;
};

int show_imatrix(const std::string& path) {
  auto m = calib::read_imatrix(path);
  if (!m) return fail(m.error());
  std::printf("%zu matrices, %u chunks of %u tokens, datasets:", m->entries.size(), m->chunk_count, m->chunk_size);
  for (const auto& d : m->datasets) std::printf(" %s", d.c_str());
  std::printf("\n%-40s %6s %10s %12s %12s\n", "tensor", "n_mat", "tokens", "mean act²", "max act²");
  for (const auto& [name, e] : m->entries) {
    double sum = 0, mx = 0, tokens = 0;
    for (size_t k = 0; k < e.counts.size(); ++k) {
      tokens += e.counts[k];
      for (int64_t j = 0; j < e.n_in(); ++j) {
        const double v = e.mean(int64_t(k), j);
        sum += v;
        mx = std::max(mx, v);
      }
    }
    std::printf("%-40s %6zu %10.0f %12.5g %12.5g\n", name.c_str(), e.counts.size(), tokens, sum / double(e.sums.size()), mx);
  }
  return 0;
}

int run_imatrix(ImatrixArgs a) {
  if (!a.show.empty()) return show_imatrix(a.show);
  if (a.text_file.empty()) return fail("imatrix needs -f TEXT (or --show FILE)");
  a.model = model_path(a.model);
  std::ifstream in(a.text_file, std::ios::binary);
  if (!in) return fail("cannot read " + a.text_file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto model = Model::load(a.model);
  if (!model) return fail(model.error());
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return fail(a.model + ": " + tok.error());
  const std::vector<int32_t> tokens = tok->encode(text);
  const bool bar = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  auto m = calib::collect_imatrix(
      **model, tokens,
      {.n_ctx = a.n_ctx, .max_chunks = a.chunks, .num_threads = a.threads, .bos = tok->add_bos() ? tok->bos() : -1,
       .process_output = a.process_output, .dataset = a.text_file,
       .on_chunk = [&](int64_t done, int64_t total) {
         if (!bar) return;
         const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
         std::fprintf(stderr, "\rimatrix: chunk %lld/%lld, %.0f s left  ", (long long)done, (long long)total,
                      s / double(done) * double(total - done));
       }});
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (!m) return fail(m.error());
  if (auto s = calib::write_imatrix(*m, a.out); !s) return fail(s.error());
  std::fprintf(stderr, "imatrix: %zu matrices from %u chunks of %u tokens (%zu tokens in the text) -> %s, %.1f s\n",
               m->entries.size(), m->chunk_count, m->chunk_size, tokens.size(), a.out.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace

void register_imatrix(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<ImatrixArgs>();
  auto* cmd = app.add_subcommand("imatrix", "Importance matrix of a calibration text (llama-imatrix's statistics and GGUF format)");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("-f,--file", a->text_file, "Calibration text");
  cmd->add_option("--show", a->show, "Summarize an imatrix file (GGUF or legacy .dat) instead");
  cmd->add_option("-o,--output", a->out, "Output file (default imatrix.gguf)");
  cmd->add_option("-c,--ctx", a->n_ctx, "Chunk size in tokens (default 512)")->check(CLI::Range(int64_t(16), int64_t(1) << 16));
  cmd->add_option("--chunks", a->chunks, "Chunks at most (default: all)");
  cmd->add_flag("--process-output", a->process_output, "Also collect output.weight");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->callback([&handler, a] { handler = [a] { return run_imatrix(*a); }; });
}

}  // namespace kvasir::cli
