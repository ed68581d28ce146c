#include "cli/commands.h"

#include <cstdio>
#include <exception>
#include <string>

namespace kvasir::cli {

int main(int argc, char** argv) {
  CLI::App app{"kvasir: LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvasir ") + KVASIR_VERSION);
  Handler handler;
  register_run(app, handler);
  register_chat(app, handler);
  register_inspect(app, handler);
  register_logits(app, handler);
  register_tokenizer_commands(app, handler);
  register_chat_template(app, handler);
  register_synth(app, handler);
  register_bench(app, handler);
  register_batch(app, handler);
  register_perplexity(app, handler);
  register_quantize(app, handler);
  register_embed(app, handler);
  register_spec_sweep(app, handler);
  register_imatrix(app, handler);
  register_pull(app, handler);
  register_serve(app, handler);
  register_router(app, handler);
  register_loadgen(app, handler);
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
