// Temporary: subcommands not yet built.
#include "cli/commands.h"
namespace kvasir::cli {
void register_run(CLI::App&, Handler&) {}
void register_logits(CLI::App&, Handler&) {}
void register_tokenizer_commands(CLI::App&, Handler&) {}
void register_chat_template(CLI::App&, Handler&) {}
}  // namespace kvasir::cli
