// kvasir command-line entry point: parses the subcommand and exits with its status.
#include "cli/commands.h"

int main(int argc, char** argv) { return kvasir::cli::main(argc, argv); }
