// Temporary stub until the real subcommand lands; delete this file then.
#include "cli/commands.h"
namespace kvasir::cli {
void register_run(CLI::App&, Handler&) {}
void register_logits(CLI::App&, Handler&) {}
}  // namespace kvasir::cli
