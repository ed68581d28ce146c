// The kvasir subcommands. Each cmd_*.cpp registers one or more subcommands on the app;
// a handler returns the process exit code (0 ok, 1 error with a message on stderr).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace kvasir::cli {

// Subcommand handlers run after parsing; they set the exit code here.
using Handler = std::function<int()>;

void register_inspect(CLI::App& app, Handler& handler);
void register_run(CLI::App& app, Handler& handler);
void register_chat(CLI::App& app, Handler& handler);
void register_logits(CLI::App& app, Handler& handler);
void register_tokenizer_commands(CLI::App& app, Handler& handler);  // tokenize, detokenize
void register_chat_template(CLI::App& app, Handler& handler);
void register_synth(CLI::App& app, Handler& handler);
void register_lora(CLI::App& app, Handler& handler);
void register_bench(CLI::App& app, Handler& handler);
void register_batch(CLI::App& app, Handler& handler);
void register_serve(CLI::App& app, Handler& handler);
void register_router(CLI::App& app, Handler& handler);
void register_loadgen(CLI::App& app, Handler& handler);
void register_perplexity(CLI::App& app, Handler& handler);
void register_quantize(CLI::App& app, Handler& handler);
void register_embed(CLI::App& app, Handler& handler);
void register_spec_sweep(CLI::App& app, Handler& handler);
void register_imatrix(CLI::App& app, Handler& handler);
void register_prune(CLI::App& app, Handler& handler);
void register_distill(CLI::App& app, Handler& handler);
void register_compress(CLI::App& app, Handler& handler);  // prune -> quantize, one table
void register_pull(CLI::App& app, Handler& handler);  // pull, list

int main(int argc, char** argv);

}  // namespace kvasir::cli
