// Batched decode throughput: S sequences each prefilled with P random tokens, then N decode
// steps in which one batch carries one new token of every sequence (what a serving engine does
// with S concurrent requests). Prints aggregate tokens/s (S * N / seconds of the N steps) as one
// JSON line per thread count, like bench/peer_llamacpp.py --parallel S, so the two compare.
//
//   batched_decode_bench -m MODEL.gguf [-s 8] [-p 32] [-n 32] [-r 3] [-t 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"

using namespace kvasir;

namespace {

struct Args {
  std::string model;
  int64_t seqs = 8, prompt = 32, gen = 32;
  int reps = 3, threads = 2;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "-m") a.model = v;
    else if (k == "-s") a.seqs = std::atoll(v);
    else if (k == "-p") a.prompt = std::atoll(v);
    else if (k == "-n") a.gen = std::atoll(v);
    else if (k == "-r") a.reps = std::atoi(v);
    else if (k == "-t") a.threads = std::atoi(v);
    else return false;
  }
  return !a.model.empty() && a.seqs > 0 && a.prompt > 0 && a.gen > 0 && a.reps > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: %s -m MODEL.gguf [-s SEQS] [-p PROMPT] [-n GEN] [-r REPS] [-t THREADS]\n", argv[0]);
    return 2;
  }
  auto model = Model::load(a.model);
  if (!model) {
    std::fprintf(stderr, "error: %s\n", model.error().c_str());
    return 1;
  }
  const Model& m = **model;
  const int64_t vocab = m.config().n_vocab, bs = 16;
  const int64_t blocks_per_seq = (a.prompt + a.gen + bs - 1) / bs;
  auto kv = KvCache::create(m.config(), {.n_blocks = a.seqs * blocks_per_seq, .block_size = bs});
  if (!kv) {
    std::fprintf(stderr, "error: %s\n", kv.error().c_str());
    return 1;
  }
  Forward fwd(m, {.max_batch_tokens = std::max(a.prompt, a.seqs), .num_threads = a.threads});
  std::vector<std::vector<int32_t>> tables(size_t(a.seqs));
  for (int64_t s = 0; s < a.seqs; ++s)
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(int32_t(s * blocks_per_seq + b));
  std::mt19937 rng(42);
  std::vector<double> tps;
  for (int rep = -1; rep < a.reps; ++rep) {  // rep -1 warms up
    for (int64_t s = 0; s < a.seqs; ++s) {
      Batch b;
      b.add_sequence(tables[size_t(s)]);
      for (int64_t i = 0; i < a.prompt; ++i) b.add(int32_t(rng() % uint32_t(vocab)), int32_t(i), 0, i + 1 == a.prompt);
      if (auto r = fwd.forward(b, *kv); !r) return std::fprintf(stderr, "error: %s\n", r.error().c_str()), 1;
    }
    std::vector<int32_t> tok(size_t(a.seqs));
    for (int64_t s = 0; s < a.seqs; ++s) tok[size_t(s)] = int32_t((s * 7919 + 1) % vocab);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < a.gen; ++step) {
      Batch b;
      for (int64_t s = 0; s < a.seqs; ++s) {
        b.add_sequence(tables[size_t(s)]);
        b.add(tok[size_t(s)], int32_t(a.prompt + step), int32_t(s), true);
      }
      if (auto r = fwd.forward(b, *kv); !r) return std::fprintf(stderr, "error: %s\n", r.error().c_str()), 1;
      for (auto& t : tok) t = int32_t((uint32_t(t) * 2654435761u + 7u) % uint32_t(vocab));
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep >= 0) tps.push_back(double(a.seqs * a.gen) / sec);
  }
  std::sort(tps.begin(), tps.end());
  double mean = 0;
  for (double x : tps) mean += x;
  mean /= double(tps.size());
  std::printf("{\"engine\": \"kvasir\", \"test\": \"tg%lld x%lld\", \"threads\": %d, \"tokens_per_s\": %.3f, "
              "\"median\": %.3f, \"prompt\": %lld}\n",
              (long long)a.gen, (long long)a.seqs, a.threads, mean, tps[tps.size() / 2], (long long)a.prompt);
  return 0;
}
