#include "cli/commands.h"

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

namespace kvasir::cli {

int main(int argc, char** argv) {
  CLI::App app{"kvasir: LLM inference engine"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows each option's default
  app.set_version_flag("--version", std::string("kvasir ") + KVASIR_VERSION);
  Handler handler;
  register_run(app, handler);
  register_chat(app, handler);
  register_inspect(app, handler);
  register_logits(app, handler);
  register_tokenizer_commands(app, handler);
  register_chat_template(app, handler);
  register_synth(app, handler);
  register_lora(app, handler);
  register_bench(app, handler);
  register_batch(app, handler);
  register_perplexity(app, handler);
  register_quantize(app, handler);
  register_embed(app, handler);
  register_spec_sweep(app, handler);
  register_imatrix(app, handler);
  register_prune(app, handler);
  register_distill(app, handler);
  register_compress(app, handler);
  register_pull(app, handler);
  register_serve(app, handler);
  register_router(app, handler);
  register_loadgen(app, handler);
  // An unknown command is named as such (CLI11 would only say that a subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : std::as_const(app).get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sub->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "kvasir: unknown command '%s'; the commands are %s (kvasir --help)\n", argv[1], names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return handler ? handler() : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace kvasir::cli
