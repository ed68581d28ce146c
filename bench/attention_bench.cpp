// Decode attention alone: S sequences at depth D, one query row each, over L layers of the
// small synthetic shape (12 heads of 64, F16 K/V, 16-token blocks of a KvCache), every
// sequence's blocks scattered over the pool like a long-running engine's. Threads split the
// work as Forward does (units of one sequence x a run of KV heads). Prints the median time per
// step and the K/V bytes read per second; with --cached every sequence reads sequence 0's
// blocks, which leaves the arithmetic alone (the data stays in cache).
//
// -H / -G / -D set the query heads, KV heads and head dim (Gemma 3 270M: -H 4 -G 1 -D 256);
// -k the K/V type (f16, f32, q8_0, q4_0). --in-order gives each sequence consecutive blocks (a
// fresh engine's single sequence); otherwise they are scattered. When the units are fewer than
// twice the threads, the keys are split by span and merged as Forward does (one long sequence
// on one KV head uses every thread).
//
//   attention_bench [-s 64] [-d 176] [-l 12] [-t 2] [-r 9] [-H 12] [-G 12] [-D 64] [-k f16] [--cached] [--in-order]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/config.h"
#include "model/kv_cache.h"

using namespace kvasir;

int main(int argc, char** argv) {
  int64_t seqs = 64, depth = 176, layers = 12, reps = 9, heads = 12, kv_heads = 12, hd = 64;
  int threads = 2;
  bool cached = false, in_order = false;
  DType type = DType::F16;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--cached") cached = true;
    else if (k == "--in-order") in_order = true;
    else if (i + 1 < argc && k == "-s") seqs = std::atoll(argv[++i]);
    else if (i + 1 < argc && k == "-d") depth = std::atoll(argv[++i]);
    else if (i + 1 < argc && k == "-l") layers = std::atoll(argv[++i]);
    else if (i + 1 < argc && k == "-t") threads = std::atoi(argv[++i]);
    else if (i + 1 < argc && k == "-r") reps = std::atoll(argv[++i]);
    else if (i + 1 < argc && k == "-H") heads = std::atoll(argv[++i]);
    else if (i + 1 < argc && k == "-G") kv_heads = std::atoll(argv[++i]);
    else if (i + 1 < argc && k == "-D") hd = std::atoll(argv[++i]);
    else if (i + 1 < argc && k == "-k") {
      const auto t = dtype_from_name(argv[++i]);
      if (!t) return std::fprintf(stderr, "unknown K/V type %s\n", argv[i]), 2;
      type = *t;
    }
    else {
      std::fprintf(stderr, "usage: %s [-s SEQS] [-d DEPTH] [-l LAYERS] [-t THREADS] [-r REPS] [-H HEADS] [-G KV_HEADS] [-D HEAD_DIM] [-k TYPE] [--cached] [--in-order]\n", argv[0]);
      return 2;
    }
  }
  const int64_t bs = 16;
  const int64_t per_seq = depth / bs + 1, blocks = seqs * per_seq;
  ModelConfig c;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = hd;
  auto kv = KvCache::create(c, {.n_blocks = blocks, .block_size = bs, .type = type});
  if (!kv) return std::fprintf(stderr, "%s\n", kv.error().c_str()), 1;
  std::mt19937 rng(1);
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  if (!in_order) std::shuffle(ids.begin(), ids.end(), rng);
  auto random_row = [&](std::vector<float>& v) {
    for (auto& x : v) x = float(int(rng() % 2001) - 1000) / 1000.f;
  };
  std::vector<float> k(size_t(kv_heads * hd)), v(k.size());
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t s = 0; s < (cached ? 1 : seqs); ++s)
      for (int64_t pos = 0; pos <= depth; ++pos) {
        random_row(k), random_row(v);
        kernels::kv_store(kv->layer(l), ids.data() + s * per_seq, pos, k.data(), v.data());
      }
  std::vector<float> q(size_t(seqs * heads * hd)), out(q.size());
  random_row(q);

  ThreadPool tp(threads);
  const kernels::AttentionParams ap{heads, 0, 0.125f, 0.f};
  const int64_t scratch_floats = (kernels::attention_scratch_floats({nullptr, nullptr, type, bs, kv_heads, hd}, ap) + 15) & ~15;
  std::vector<float> scratch(size_t(scratch_floats * threads));
  const int64_t heads_per_unit = std::max<int64_t>(1, kv_heads / threads), runs = (kv_heads + heads_per_unit - 1) / heads_per_unit;
  // Span split (Forward::attend_tiles): one partial per (sequence, span), merged per unit.
  const kernels::SpanRange spans = kernels::attention_spans(depth, 1, 0);
  const bool split = seqs * runs < 2 * threads && spans.count() > 1;
  const int64_t part_floats = kernels::attention_partial_floats(1, heads, hd);
  std::vector<float> partials(size_t(split ? seqs * spans.count() * part_floats : 0));
  std::vector<kernels::AttentionPartial> parts;
  for (int64_t i = 0; split && i < seqs * spans.count(); ++i)
    parts.push_back(kernels::attention_partial_at(partials.data() + i * part_floats, 1, heads, hd));
  std::vector<double> ms;
  for (int64_t rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < layers; ++l) {
      const kernels::KvLayerView view = kv->layer(l);
      auto table = [&](int64_t s) { return ids.data() + (cached ? 0 : s) * per_seq; };
      auto heads_of = [&](int64_t r) { return std::pair{r * heads_per_unit, std::min(kv_heads, r * heads_per_unit + heads_per_unit)}; };
      if (!split) {
        tp.parallel_for(seqs * runs, 1, [&](int64_t b, int64_t e, int thread) {
          for (int64_t u = b; u < e; ++u) {
            const int64_t s = u / runs;
            const auto [g0, g1] = heads_of(u % runs);
            kernels::attention_rows(q.data() + s * heads * hd, 1, heads * hd, view, table(s), depth, ap, g0, g1,
                                    out.data() + s * heads * hd, scratch.data() + thread * scratch_floats);
          }
        }, 16);
        continue;
      }
      tp.parallel_for(seqs * spans.count() * runs, 1, [&](int64_t b, int64_t e, int thread) {
        for (int64_t u = b; u < e; ++u) {
          const int64_t i = u / runs, s = i / spans.count();
          const auto [g0, g1] = heads_of(u % runs);
          kernels::attention_span(q.data() + s * heads * hd, 1, heads * hd, view, table(s), depth, ap, g0, g1,
                                  spans.first + i % spans.count(), parts[size_t(i)], scratch.data() + thread * scratch_floats);
        }
      }, 16);
      tp.parallel_for(seqs * runs, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t u = b; u < e; ++u) {
          const int64_t s = u / runs;
          const auto [g0, g1] = heads_of(u % runs);
          kernels::attention_merge(parts.data() + s * spans.count(), spans.count(), 1, heads * hd, view, ap, g0, g1,
                                   out.data() + s * heads * hd);
        }
      });
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double bytes = double(seqs * (depth + 1) * layers * 2) * double(row_bytes(type, kv_heads * hd));
  std::printf("attention (%s K/V): %lld seqs at depth %lld, %lld layers, %d threads%s%s: median %.2f ms/step (min %.2f), %.1f GB/s of K/V\n",
              std::string(dtype_name(type)).c_str(), (long long)seqs, (long long)depth, (long long)layers, threads, cached ? " (cached)" : "", split ? " (split by span)" : "", med, ms.front(),
              bytes / med / 1e6);
}
