// Temporary stub until the real subcommand lands; delete this file then.
#include "cli/commands.h"
namespace kvasir::cli {
void register_tokenizer_commands(CLI::App&, Handler&) {}
}  // namespace kvasir::cli
