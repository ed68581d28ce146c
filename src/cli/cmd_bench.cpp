// `kvasir bench -m MODEL -p 512 -n 128 -r 5 [-t THREADS] [-d DEPTH] [--kv-type T,...] [--json|--csv]`:
// the llama-bench equivalent. pp = prompt processing (one P-token prefill), tg = generation (N
// single-token steps after D tokens of context; the depth is computed once and every run starts
// back there). Mean ± stdev over R runs after one warm-up,
// with achieved GB/s (weights + KV read per generated token) and GFLOP/s (prefill matmuls +
// attention), and a hash of the logits as a cheap correctness check.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>

#include "cli/common.h"
#include "cli/commands.h"
#include "cuda/cuda_runner.h"
#include "kernels/quant/quant.h"
#include "backends/runner_factory.h"

namespace kvasir::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string prompts = "512", gens = "128", threads, depths = "0";
  int reps = 5;
  bool no_warmup = false;  // long prompts: the warm-up would take as long as a timed run
  int64_t batch = 512;
  bool json = false, csv = false;
  std::string kv_type = "f16";
  bool kv_no_calibrate = false;
  std::string device = "cpu";
};

struct Stats {
  double mean = 0, stdev = 0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.stdev += (x - s.mean) * (x - s.mean);
  s.stdev = v.size() > 1 ? std::sqrt(s.stdev / double(v.size() - 1)) : 0;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Result<std::vector<int64_t>> parse_list(const std::string& text, const char* what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return Error{std::string("bad value '") + item + "' in " + what};
    }
  }
  if (out.empty()) return Error{std::string("empty ") + what};
  return out;
}

// The matrices one token reads: every dense one, and for a MoE layer the router plus the
// experts_used experts (the first ones stand for any: experts share shapes and types).
std::vector<const Matrix*> matrices_per_token(const Model& m) {
  const Weights& w = m.weights();
  std::vector<const Matrix*> out = {&w.output};
  for (const auto& l : w.layers) {
    for (const Matrix* x : {&l.wq, &l.wk, &l.wv, &l.wo}) out.push_back(x);
    if (l.gate_exps.empty()) {
      for (const Matrix* x : {&l.w_gate, &l.w_up, &l.w_down}) out.push_back(x);
      continue;
    }
    out.push_back(&l.router);
    for (int64_t e = 0; e < m.config().n_experts_used; ++e)
      for (const auto* mats : {&l.gate_exps, &l.up_exps, &l.down_exps}) out.push_back(&(*mats)[size_t(e)]);
  }
  return out;
}

// Bytes of weights one token reads (the embedding contributes one row).
uint64_t weight_bytes_per_token(const Model& m) {
  uint64_t total = row_bytes(m.weights().token_embd.type, m.weights().token_embd.n_in);
  for (const Matrix* x : matrices_per_token(m)) total += uint64_t(row_bytes(x->type, x->n_in)) * uint64_t(x->n_out);
  return total;
}

// Multiply-adds of the matmuls per token (x2 = FLOPs), without attention.
double matmul_flops_per_token(const Model& m) {
  double macs = 0;
  for (const Matrix* x : matrices_per_token(m)) macs += double(x->n_in) * double(x->n_out);
  return 2 * macs;
}

// "bench: pp512, 2 threads, run 3/5" on a terminal (stderr only, never in a pipe), cleared after.
void show_progress(const std::string& test, int threads, int rep, int reps) {
  static const bool tty = isatty(STDERR_FILENO);
  if (!tty) return;
  if (rep < 0) std::fprintf(stderr, "\r\033[Kbench: %s, %d threads, warm-up", test.c_str(), threads);
  else std::fprintf(stderr, "\r\033[Kbench: %s, %d threads, run %d/%d", test.c_str(), threads, rep + 1, reps);
}

uint64_t fnv1a(const float* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = reinterpret_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n * 4; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct Row {
  std::string test;
  int threads;
  Stats tps;
  double gbps, gflops;
  uint64_t hash;
  std::vector<double> runs;  // tokens/s of each run, in order
};

int run_bench(const BenchArgs& a) {
  auto ps = parse_list(a.prompts, "-p");
  auto ns = parse_list(a.gens, "-n");
  auto ds = parse_list(a.depths, "-d");
  auto ts = parse_list(a.threads.empty() ? std::to_string(ThreadPool::default_threads()) : a.threads, "-t");
  for (auto* r : {&ps, &ns, &ds, &ts})
    if (!*r) return fail(r->error());
  std::vector<DType> kv_types;
  {
    std::stringstream ss(a.kv_type);
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto t = parse_kv_type(item);
      if (!t) return fail(t.error());
      kv_types.push_back(*t);
    }
    if (kv_types.empty()) return fail("empty --kv-type");
  }
  auto model = Model::load(model_path(a.model));
  if (!model) return fail(model.error());
  const Model& m = **model;
  const ModelConfig& c = m.config();
  const uint64_t wbytes = weight_bytes_per_token(m);
  const double mm_flops = matmul_flops_per_token(m);
  std::mt19937 rng(42);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(c.n_vocab));
    return t;
  };
  using Clock = std::chrono::steady_clock;
  std::vector<Row> rows;
  int64_t max_ctx = 16;
  for (int64_t d : *ds) {
    for (int64_t p : *ps) max_ctx = std::max(max_ctx, d + p);
    for (int64_t n : *ns) max_ctx = std::max(max_ctx, d + n);
  }
  std::vector<std::shared_ptr<const KvTransform>> kv_transforms(kv_types.size());
  for (size_t k = 0; k < kv_types.size(); ++k) {
    if (dtype_info(kv_types[k]).block_size == 1 || a.kv_no_calibrate) continue;
    // Quantized K/V as run and serve store them (the tokenizer is loaded only here).
    auto tok = Tokenizer::from_gguf(m.gguf());
    if (!tok) return fail(tok.error());
    auto t = calibrate_kv_cache(m, *tok, kv_types[k], max_ctx, "", ThreadPool::default_threads());
    if (!t) return fail(t.error());
    kv_transforms[k] = *t;
  }
  const bool several = kv_types.size() > 1;
  auto label = [&](const std::string& test, size_t k) {
    return several ? test + " kv " + std::string(dtype_info(kv_types[k]).name) : test;
  };
  auto device = cuda::parse_device(a.device);
  if (!device) return fail(device.error());
  if (*device >= 0 && (kv_types.size() != 1 || kv_types[0] != DType::F16))
    return fail("--device cuda keeps K and V in F16 (--kv-type f16)");
  std::string isa = kernels::kernel_isa();
  double copy_gbps = 0;  // the device's measured copy bandwidth (CUDA)
  if (*device >= 0) {
    auto d = cuda::describe_device(*device);
    if (!d) return fail(d.error());
    isa = "cuda (" + *d + ")";
    auto bw = cuda::copy_bandwidth_gbps(*device);
    if (!bw) return fail(bw.error());
    copy_gbps = *bw;
  }
  for (int64_t t : *ts) {
    // One session per KV type: each test's runs alternate between them, so that a machine whose
    // load changes shifts every type alike.
    std::vector<std::unique_ptr<runtime::Session>> sessions;
    for (size_t k = 0; k < kv_types.size(); ++k) {
      auto session = backends::create_session(
          m, {.n_ctx = max_ctx, .max_batch_tokens = a.batch, .n_threads = int(t), .device = *device,
              .kv = {.type = kv_types[k], .transform = kv_transforms[k]}});
      if (!session) return fail(session.error());
      sessions.push_back(std::move(*session));
    }
    uint64_t hash = 0;
    auto keep_hash = [&](int64_t, const float* l) { hash = fnv1a(l, size_t(c.n_vocab)); };
    // Only the last step's logits are hashed: hashing a 150k-vocabulary row byte by byte after
    // every decode step took ~5% of a step, time llama-bench does not spend.
    auto ignore = [](int64_t, const float*) {};
    for (int64_t d : *ds) {
      // The depth is computed once per session; each run then goes back to it (the positions
      // beyond are rewritten by the next run).
      const auto depth_tokens = random_tokens(d);
      for (auto& s : sessions) {
        s->reset();
        if (d > 0) {
          if (isatty(STDERR_FILENO))
            std::fprintf(stderr, "\r\033[Kbench: computing %lld tokens of context", (long long)d);
          if (auto st = s->eval(depth_tokens, false, ignore); !st) return fail(st.error());
        }
      }
      // A test's runs, kv types alternating within each; run(session) returns tokens per second.
      std::vector<uint64_t> hashes(sessions.size());  // each session's last logits
      auto measure = [&](const std::string& test, const std::function<Result<double>(runtime::Session&)>& run)
          -> Result<std::vector<std::vector<double>>> {
        std::vector<std::vector<double>> tps(sessions.size());
        for (int r = a.no_warmup ? 0 : -1; r < a.reps; ++r) {  // r = -1: warm-up
          show_progress(test, int(t), r, a.reps);
          for (size_t k = 0; k < sessions.size(); ++k) {
            sessions[k]->truncate(d);
            auto v = run(*sessions[k]);
            if (!v) return Error{v.error()};
            hashes[k] = hash;
            if (r >= 0) tps[k].push_back(*v);
          }
        }
        return tps;
      };
      for (int64_t p : *ps) {
        if (p == 0) continue;
        const auto prompt = random_tokens(p);
        const std::string test = "pp" + std::to_string(p) + (d ? "@d" + std::to_string(d) : "");
        auto tps = measure(test, [&](runtime::Session& s) -> Result<double> {
          const auto t0 = Clock::now();
          if (auto st = s.eval(prompt, false, keep_hash); !st) return Error{st.error()};
          return double(p) / std::chrono::duration<double>(Clock::now() - t0).count();
        });
        if (!tps) return fail(tps.error());
        for (size_t k = 0; k < sessions.size(); ++k) {
          const Stats st = stats((*tps)[k]);
          // Attention: q·k and p·v over the average context, per head.
          const double attn = 4.0 * double(c.n_layers * c.n_heads * c.head_dim) * (double(d) + double(p) / 2);
          rows.push_back({label(test, k), int(t), st, 0, (mm_flops + attn) * st.mean / 1e9, hashes[k], (*tps)[k]});
        }
      }
      for (int64_t n : *ns) {
        if (n == 0) continue;
        const std::string test = "tg" + std::to_string(n) + (d ? "@d" + std::to_string(d) : "");
        auto tps = measure(test, [&](runtime::Session& s) -> Result<double> {
          int32_t tok[1] = {int32_t(c.n_vocab > 1 ? 1 : 0)};
          const auto t0 = Clock::now();
          for (int64_t i = 0; i < n; ++i) {
            const runtime::Session::LogitsSink sink = i + 1 == n ? runtime::Session::LogitsSink(keep_hash) : runtime::Session::LogitsSink(ignore);
            if (auto st = s.eval(tok, false, sink); !st) return Error{st.error()};
            tok[0] = int32_t((uint32_t(tok[0]) * 2654435761u + 7u) % uint32_t(c.n_vocab));
          }
          return double(n) / std::chrono::duration<double>(Clock::now() - t0).count();
        });
        if (!tps) return fail(tps.error());
        for (size_t k = 0; k < sessions.size(); ++k) {
          const Stats st = stats((*tps)[k]);
          const double kv_read = double(KvCache::bytes_per_token(c, kv_types[k])) * (double(d) + double(n) / 2);
          const double gbps = (double(wbytes) + kv_read) * st.mean / 1e9;
          rows.push_back({label(test, k), int(t), st, gbps, mm_flops * st.mean / 1e9, hashes[k], (*tps)[k]});
        }
      }
    }
  }

  const std::string name = c.arch_name + " " + std::to_string(wbytes >> 20) + " MiB";
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r\033[K");  // the progress line
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows)
      out.push_back({{"model", m.path()}, {"arch", c.arch_name}, {"weight_bytes_per_token", wbytes},
                     {"isa", isa}, {"threads", r.threads}, {"test", r.test},
                     {"tokens_per_s", r.tps.mean}, {"stdev", r.tps.stdev}, {"gb_per_s", r.gbps},
                     {"gflop_per_s", r.gflops}, {"logits_hash", r.hash}, {"reps", a.reps}, {"runs", r.runs}});
    std::printf("%s\n", out.dump(2).c_str());
  } else if (a.csv) {
    std::printf("model,threads,test,tokens_per_s,stdev,gb_per_s,gflop_per_s,logits_hash\n");
    for (const auto& r : rows)
      std::printf("%s,%d,%s,%.3f,%.3f,%.3f,%.3f,%016llx\n", m.path().c_str(), r.threads, r.test.c_str(), r.tps.mean,
                  r.tps.stdev, r.gbps, r.gflops, (unsigned long long)r.hash);
  } else {
    std::printf("| model | isa | threads | test | t/s | GB/s | GFLOP/s | logits hash |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : rows)
      std::printf("| %s | %s | %d | %s | %.2f ± %.2f | %.2f | %.1f | %016llx |\n", name.c_str(), isa.c_str(),
                  r.threads, r.test.c_str(), r.tps.mean, r.tps.stdev, r.gbps, r.gflops, (unsigned long long)r.hash);
    if (copy_gbps > 0) {
      std::printf("device copy bandwidth (2 GiB device-to-device, read + write): %.0f GB/s\n", copy_gbps);
      for (const auto& r : rows)
        if (r.gbps > 0) std::printf("%s: %.0f GB/s = %.1f%% of the copy bandwidth\n", r.test.c_str(), r.gbps, 100 * r.gbps / copy_gbps);
    }
    // Several KV types: each against the first, run by run (the runs alternated).
    for (size_t i = 0; several && i < rows.size(); i += kv_types.size()) {
      for (size_t k = 1; k < kv_types.size(); ++k) {
        const Row& base = rows[i];
        const Row& other = rows[i + k];
        std::vector<double> ratio;
        std::string each;
        for (size_t r = 0; r < base.runs.size(); ++r) {
          ratio.push_back(other.runs[r] / base.runs[r]);
          each += (r ? ", " : "") + std::to_string(ratio.back()).substr(0, 4);
        }
        std::printf("%s against %s: median of the runs' ratios %.3fx (%s)\n", other.test.c_str(), base.test.c_str(),
                    median(ratio), each.c_str());
      }
    }
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and generation speed");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("-p,--n-prompt", a->prompts, "Prompt lengths, comma-separated (0 = skip)");
  cmd->add_option("-n,--n-gen", a->gens, "Generated tokens, comma-separated (0 = skip)");
  cmd->add_option("-d,--depth", a->depths, "Context depth(s) before the test");
  cmd->add_option("-t,--threads", a->threads, "Thread counts, comma-separated");
  cmd->add_option("-r,--repetitions", a->reps, "Runs per test after a warm-up")->check(CLI::Range(1, 1000));
  cmd->add_flag("--no-warmup", a->no_warmup, "Skip the warm-up run (for long prompts, where it costs a whole run)");
  cmd->add_option("-b,--batch", a->batch, "Prefill chunk in tokens")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--kv-type", a->kv_type,
                  "KV cache type(s), comma-separated: f16, f32, q8_0 or q4_0 (quantized K and V are stored in a basis "
                  "calibrated at start-up); several alternate run by run and are compared with the first");
  cmd->add_flag("--kv-no-calibrate", a->kv_no_calibrate, "Store quantized K and V as they are (no KV calibration)");
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N (the CUDA runner: F16 KV, prefill in --batch chunks)");
  cmd->add_flag("--json", a->json, "JSON output");
  cmd->add_flag("--csv", a->csv, "CSV output");
  cmd->callback([&handler, a] { handler = [a] { return run_bench(*a); }; });
}

}  // namespace kvasir::cli
