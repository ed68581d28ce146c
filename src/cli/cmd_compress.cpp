// `kvasir compress IN.gguf OUT.gguf`: the compression chain in one command. Each stage is the
// sibling command itself, run as a child process (the same checks, gates and refusals as when it
// is run by hand): `prune` (when --prune names what to cut), `distill --student` (with
// --distill-steps: the pruned copy healed toward the input on the calibration text), then
// `quantize` (--type, by RTN or a calibrated method, with the quality gate --max-kld against its
// own input); then every stage's
// file is measured against the input model: file size, decode tokens/s (`bench`), and on held-out
// text PPL, mean KL divergence and same top-1 (`perplexity --kl-base`), the last being how often
// the stage's model, used as a greedy draft of the input, has its first draft token accepted.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "cli/common.h"
#include "cli/commands.h"

extern char** environ;

namespace kvasir::cli {
namespace {

struct CompressArgs {
  std::string in, out, prune, type, method = "rtn", calib_text, eval_text;
  double max_kld = -1;
  int64_t n_ctx = 512, eval_chunks = 24, bench_tokens = 64, bench_reps = 3, distill_steps = 0, distill_chunks = 32;
  int threads = 0;
  bool json = false, keep = false;
};

// Runs this executable with args; its stdout comes back, its stderr goes to ours.
Result<std::string> run_self(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"/proc/self/exe"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return Error{"compress: cannot make a pipe"};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return Error{"compress: cannot start '" + args[0] + "'"};
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return Error{"compress: `kvasir " + args[0] + "` failed (see above)"};
  return out;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

struct Row {
  std::string stage, file;
  double mb = 0, tok_s = 0, ppl = 0, kld = 0, same_top1 = 1;
};

// A stage's figures against the input model.
Result<Row> measure(const CompressArgs& a, const std::string& stage, const std::string& file, bool is_input) {
  Row r{.stage = stage, .file = file};
  std::error_code ec;
  r.mb = double(std::filesystem::file_size(file, ec)) / (1 << 20);
  const std::string t = std::to_string(a.threads);
  auto bench = run_self({"bench", "-m", file, "-p", "0", "-n", std::to_string(a.bench_tokens), "-r", std::to_string(a.bench_reps),
                         "--json", "-t", t});
  if (!bench) return Error{bench.error()};
  const auto b = nlohmann::json::parse(*bench, nullptr, false);
  if (!b.is_array() || b.empty()) return Error{"compress: `kvasir bench` gave no figures"};
  r.tok_s = b[0].value("tokens_per_s", 0.0);
  auto ppl = run_self({"perplexity", "-m", file, "--kl-base", a.in, "-f", a.eval_text, "-c", std::to_string(a.n_ctx),
                       "--chunks", std::to_string(a.eval_chunks), "--json", "-t", t});
  if (!ppl) return Error{ppl.error()};
  const auto p = nlohmann::json::parse(*ppl, nullptr, false);
  if (!p.is_object()) return Error{"compress: `kvasir perplexity` gave no figures"};
  r.ppl = p.value("ppl", 0.0);
  r.kld = is_input ? 0.0 : p["kld"].value("mean", 0.0);
  r.same_top1 = is_input ? 1.0 : p.value("same_top1", 0.0);
  return r;
}

int run_compress(const CompressArgs& a) {
  if (a.prune.empty() && a.type.empty()) return fail("nothing to do: give --prune \"PRUNE FLAGS\" and/or --type TYPE");
  if (a.eval_text.empty()) return fail("give held-out text for the table: --eval-text FILE");
  if (a.in == a.out) return fail("the output must be another file than the input");
  if (a.method != "rtn" && a.calib_text.empty()) return fail("--method " + a.method + " calibrates: give --calib-text FILE");
  const std::string t = std::to_string(a.threads);
  std::vector<std::pair<std::string, std::string>> stages = {{"input", a.in}};
  nlohmann::ordered_json j;
  std::string current = a.in;
  const std::string healed = a.type.empty() ? a.out : a.out + ".distilled.gguf";
  const std::string pruned = a.type.empty() && a.distill_steps == 0 ? a.out : a.out + ".pruned.gguf";
  if (a.distill_steps > 0 && a.prune.empty()) return fail("--distill-steps heals a pruned copy: give --prune too");
  // The intermediate files go when the chain ends, whether it succeeds or not.
  struct Cleanup {
    std::vector<std::string> files;
    ~Cleanup() {
      std::error_code ec;
      for (const std::string& f : files) std::filesystem::remove(f, ec);
    }
  } cleanup;
  if (!a.keep)
    for (const std::string& f : {pruned, healed})
      if (f != a.out) cleanup.files.push_back(f);
  if (!a.prune.empty()) {
    if (a.calib_text.empty()) return fail("--prune chooses what to cut on calibration text: give --calib-text FILE");
    std::vector<std::string> args = {"prune", a.in, pruned, "-f", a.calib_text, "--json", "-t", t};
    for (auto& w : split_words(a.prune)) args.push_back(w);
    std::fprintf(stderr, "compress: kvasir prune ... %s\n", a.prune.c_str());
    auto r = run_self(args);
    if (!r) return fail(r.error());
    j["prune"] = nlohmann::json::parse(*r, nullptr, false);
    stages.push_back({"pruned", pruned});
    current = pruned;
  }
  if (a.distill_steps > 0) {
    std::fprintf(stderr, "compress: kvasir distill --student ... --steps %lld\n", (long long)a.distill_steps);
    auto r = run_self({"distill", "--teacher", a.in, "--student", pruned, "-o", healed, "-f", a.calib_text, "-c",
                       std::to_string(a.n_ctx), "--max-chunks", std::to_string(a.distill_chunks), "--steps",
                       std::to_string(a.distill_steps), "--eval-every", "0", "--json", "-t", t});
    if (!r) return fail(r.error());
    j["distill"] = nlohmann::json::parse(*r, nullptr, false);
    stages.push_back({"pruned + distilled", healed});
    current = healed;
  }
  if (!a.type.empty()) {
    std::vector<std::string> args = {"quantize", current, a.out, a.type, "--method", a.method, "-t", t};
    if (a.method != "rtn") args.insert(args.end(), {"--calib-text", a.calib_text, "--calib-ctx", std::to_string(a.n_ctx)});
    if (a.max_kld >= 0)
      args.insert(args.end(), {"--max-kld", std::to_string(a.max_kld), "--eval-text", a.eval_text, "--eval-ctx", std::to_string(a.n_ctx)});
    if (current != a.in) args.push_back("--allow-requantize");  // a pruned file keeps the input's types
    std::fprintf(stderr, "compress: kvasir quantize ... %s --method %s\n", a.type.c_str(), a.method.c_str());
    auto r = run_self(args);
    if (!r) return fail(r.error());
    stages.push_back({"quantized " + a.type + (a.method == "rtn" ? "" : " (" + a.method + ")"), a.out});
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < stages.size(); ++i) {
    std::fprintf(stderr, "compress: measuring %s\n", stages[i].first.c_str());
    auto r = measure(a, stages[i].first, stages[i].second, i == 0);
    if (!r) return fail(r.error());
    rows.push_back(std::move(*r));
  }
  const double base_tok_s = rows[0].tok_s;
  j["stages"] = nlohmann::ordered_json::array();
  for (const Row& r : rows)
    j["stages"].push_back({{"stage", r.stage}, {"file", r.file}, {"mib", r.mb}, {"tokens_per_s", r.tok_s},
                           {"speedup", r.tok_s / std::max(base_tok_s, 1e-9)}, {"ppl", r.ppl}, {"kld", r.kld},
                           {"draft_acceptance", r.same_top1}});
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (j.contains("prune") && j["prune"].is_object()) {
    const auto& pr = j["prune"];
    std::printf("pruned: %lld -> %lld layers, FFN %lld -> %lld channels", (long long)pr.value("layers_in", 0),
                (long long)pr.value("layers_out", 0), (long long)pr.value("n_ff_in", 0), (long long)pr.value("n_ff_out", 0));
    if (pr.contains("sparsity")) std::printf(", %.1f%% of the pruned matrices' weights zeroed", 100 * pr.value("sparsity", 0.0));
    std::printf("\n");
  }
  std::printf("%-28s %10s %10s %8s %10s %9s %16s\n", "stage", "MiB", "tok/s", "speed", "PPL", "KLD", "draft acceptance");
  for (const Row& r : rows)
    std::printf("%-28s %10.1f %10.1f %7.2fx %10.3f %9.4f %15.1f%%\n", r.stage.c_str(), r.mb, r.tok_s,
                r.tok_s / std::max(base_tok_s, 1e-9), r.ppl, r.kld, 100 * r.same_top1);
  std::printf("(tok/s: `kvasir bench -p 0 -n %lld`; PPL, KLD and draft acceptance (same top-1: a greedy draft's first token\n"
              " accepted) against the input on %s)\n",
              (long long)a.bench_tokens, a.eval_text.c_str());
  return 0;
}

}  // namespace

void register_compress(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<CompressArgs>();
  auto* cmd = app.add_subcommand("compress", "Prune, distil, quantize, and print one table against the input");
  cmd->add_option("input", a->in, "Input GGUF (the full-precision model)")->required();
  cmd->add_option("output", a->out, "Output GGUF")->required();
  cmd->add_option("--prune", a->prune, "`kvasir prune` flags, quoted, e.g. \"--ffn-keep 0.75\" or \"--remove-layers 2\"");
  cmd->add_option("--distill-steps", a->distill_steps,
                  "Heal the pruned copy toward the input first (`kvasir distill --student`, on --calib-text)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--distill-chunks", a->distill_chunks, "Calibration chunks the distillation trains on (default 32)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--type", a->type, "Quantize the (pruned) model to this type, e.g. q4_k_m");
  cmd->add_option("--method", a->method, "rtn (default), gptq, awq or awq-gptq")
      ->check(CLI::IsMember({"rtn", "gptq", "awq", "awq-gptq"}));
  cmd->add_option("--max-kld", a->max_kld, "The quantization's quality gate (against its own input, on --eval-text)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--calib-text", a->calib_text, "Calibration text (pruning's statistics, calibrated quantization)");
  cmd->add_option("--eval-text", a->eval_text, "Held-out text for the table and the gate")->required();
  cmd->add_option("-c,--ctx", a->n_ctx, "Chunk size of calibration and evaluation (default 512)")
      ->check(CLI::Range(int64_t(16), int64_t(1) << 16));
  cmd->add_option("--eval-chunks", a->eval_chunks, "Held-out chunks scored per stage (default 24)")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--bench-tokens", a->bench_tokens, "Decoded tokens per speed run (default 64)")->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  cmd->add_option("--bench-reps", a->bench_reps, "Speed runs per stage (default 3)")->check(CLI::Range(int64_t(1), int64_t(100)));
  cmd->add_flag("--keep-pruned", a->keep, "Keep the intermediate files (OUT.pruned.gguf, OUT.distilled.gguf)");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([&handler, a] { handler = [a] { return run_compress(*a); }; });
}

}  // namespace kvasir::cli
