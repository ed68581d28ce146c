// Temporary stub until the real subcommand lands; delete this file then.
#include "cli/commands.h"
namespace kvasir::cli {
void register_chat_template(CLI::App&, Handler&) {}
}  // namespace kvasir::cli
