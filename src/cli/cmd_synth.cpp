// `kvasir synth --preset NAME --type TYPE -o OUT.gguf [--vocab FROM.gguf] [--seed S]`
#include <cstdio>

#include "cli/common.h"
#include "cli/commands.h"
#include "cli/synth.h"

namespace kvasir::cli {

void register_synth(CLI::App& app, Handler& handler) {
  struct Args {
    std::string preset = "small", type = "q4_0", vocab, out;
    uint64_t seed = 1;
    int threads = 0;
    int64_t layers = 0;
  };
  auto a = std::make_shared<Args>();
  std::string presets;
  for (const auto& n : synth_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  auto* cmd = app.add_subcommand("synth", "Write a GGUF with random weights of a realistic shape");
  cmd->add_option("--preset", a->preset, "Shape: " + presets);
  cmd->add_option("--type", a->type, "Tensor type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k..q6_k) or mix (q4_k_m, q4_k_s, q5_k_m)");
  cmd->add_option("--vocab", a->vocab, "Copy the tokenizer from this GGUF (default: a generated vocabulary)");
  cmd->add_option("--layers", a->layers, "Override the number of layers");
  cmd->add_option("--seed", a->seed, "Random seed");
  cmd->add_option("-t,--threads", a->threads, "Threads");
  cmd->add_option("-o,--output", a->out, "Output GGUF")->required();
  cmd->callback([&handler, a] {
    handler = [a] {
      auto shape = synth_preset(a->preset);
      if (!shape) return fail(shape.error());
      if (a->layers > 0) shape->n_layers = a->layers;
      SynthOptions o{.shape = *shape, .type = a->type, .vocab_from = a->vocab, .seed = a->seed, .num_threads = a->threads};
      if (auto s = write_synthetic_model(o, a->out); !s) return fail(s.error());
      std::fprintf(stderr, "wrote %s (%s, %s)\n", a->out.c_str(), a->preset.c_str(), a->type.c_str());
      return 0;
    };
  });
}

}  // namespace kvasir::cli
