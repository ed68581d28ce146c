// LoRA files: `kvasir export-lora -m BASE.gguf --lora A.gguf [--scale S] -o OUT.gguf [--type T]`
// merges an adapter into the weights (llama.cpp's llama-export-lora); `kvasir synth-lora -m
// BASE.gguf -o OUT.gguf [--rank R] [--alpha A] [--seed S]` writes a random adapter of the base's
// shapes (tests, benchmarks).
#include <cstdio>

#include "cli/common.h"
#include "cli/commands.h"
#include "model/lora.h"

namespace kvasir::cli {

void register_lora(CLI::App& app, Handler& handler) {
  struct Args {
    std::string model, lora, out, type;
    float scale = 1.f, alpha = 0;
    int64_t rank = 8;
    uint64_t seed = 1;
  };
  auto a = std::make_shared<Args>();
  auto* exp = app.add_subcommand("export-lora", "Merge a LoRA adapter into a model's weights");
  exp->add_option("-m,--model", a->model, "Base model GGUF")->required();
  exp->add_option("--lora", a->lora, "LoRA adapter GGUF (llama.cpp's format)")->required();
  exp->add_option("--scale", a->scale, "Multiplies the adapter's delta")->capture_default_str();
  exp->add_option("--type", a->type, "Type of the merged tensors (f32, f16, bf16, q8_0, ...; default: each tensor's own)");
  exp->add_option("-o,--output", a->out, "Output GGUF")->required();
  exp->callback([&handler, a] {
    handler = [a] {
      std::optional<DType> type;
      if (!a->type.empty() && !(type = dtype_from_name(a->type))) return fail("unknown type '" + a->type + "'");
      auto model = Model::load(a->model);
      if (!model) return fail(model.error());
      auto lora = LoraAdapter::load(a->lora, **model, a->scale);
      if (!lora) return fail(lora.error());
      if (auto s = write_merged_lora(**model, **lora, a->out, type); !s) return fail(s.error());
      std::fprintf(stderr, "wrote %s (%zu matrices merged)\n", a->out.c_str(), (*lora)->num_matrices());
      return 0;
    };
  });
  auto* syn = app.add_subcommand("synth-lora", "Write a LoRA adapter with random factors for a model");
  syn->add_option("-m,--model", a->model, "Base model GGUF")->required();
  syn->add_option("--rank", a->rank, "Rank")->capture_default_str();
  syn->add_option("--alpha", a->alpha, "adapter.lora.alpha (0: the rank)")->capture_default_str();
  syn->add_option("--seed", a->seed, "Random seed")->capture_default_str();
  syn->add_option("-o,--output", a->out, "Output GGUF")->required();
  syn->callback([&handler, a] {
    handler = [a] {
      auto model = Model::load(a->model);
      if (!model) return fail(model.error());
      const float alpha = a->alpha != 0 ? a->alpha : float(a->rank);
      if (auto s = write_random_lora(**model, a->out, a->rank, alpha, a->seed); !s) return fail(s.error());
      std::fprintf(stderr, "wrote %s (rank %lld)\n", a->out.c_str(), static_cast<long long>(a->rank));
      return 0;
    };
  });
}

}  // namespace kvasir::cli
