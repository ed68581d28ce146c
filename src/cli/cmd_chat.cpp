// `kvasir chat [-m MODEL]`: a conversation in the terminal. Each turn renders the whole history
// with the model's chat template (its family's built-in one when the file has none), generates on
// the serving engine (its prefix cache keeps the earlier turns' KV, so a turn prefills only what
// is new) and streams the answer. Commands: /exit or /bye, /clear, /system TEXT, /help. A line
// ending in '\' continues on the next; """ opens and closes a multi-line block. Ctrl-C stops the
// answer being written (what was written stays in the history); Ctrl-D at the prompt exits.
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/cuda_runner.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "backends/engine_factory.h"
#include "engine/engine.h"
#include "model/model.h"
#include "chat/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {
namespace {

using ordered_json = nlohmann::ordered_json;

struct ChatArgs {
  std::string model, chat_template, system, kv_type = "f16";
  std::string device = "cpu";
  bool kv_no_calibrate = false;
  SamplingParams sampling;
  int32_t n_predict = 1024;
  int32_t n_ctx = 4096;
  int threads = 0;
  std::string quantize;
  bool ignore_eos = false;
};

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

// SIGINT blocked in the calling thread, so that the threads it starts (the engine's pool)
// inherit the mask and never take the signal.
void block_sigint(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  pthread_sigmask(how, &set, nullptr);
}

// SIGINT sets the flag instead of killing the process, and only this (the main) thread takes it;
// no SA_RESTART, so a read at the prompt returns with EINTR.
void catch_sigint() {
  struct sigaction sa{};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  block_sigint(SIG_UNBLOCK);
}

enum class Read { line, interrupted, eof };

// Reads one line from stdin. The flag is checked between short polls rather than relying on
// read() failing with EINTR: a Ctrl-C that lands just before the read would otherwise be lost.
Read read_line(std::string& out) {
  static std::string pending;  // bytes read past the last line
  out.clear();
  for (;;) {
    if (const size_t nl = pending.find('\n'); nl != std::string::npos) {
      out = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      while (!out.empty() && out.back() == '\r') out.pop_back();
      return Read::line;
    }
    if (g_interrupted.exchange(false)) {
      pending.clear();
      return Read::interrupted;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;  // timeout or EINTR: check the flag again
    char buf[4096];
    const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // end of input: a last line without a newline still counts
      if (pending.empty()) return Read::eof;
      out.swap(pending);
      return Read::line;
    }
    pending.append(buf, size_t(n));
  }
}

// One user input: continuation lines ('\' at the end) and """ blocks joined with newlines.
Read read_input(std::string& text, bool tty) {
  text.clear();
  std::string line;
  if (tty) std::fputs(">>> ", stdout), std::fflush(stdout);
  Read r = read_line(line);
  if (r != Read::line) return r;
  if (line == "\"\"\"") {
    for (;;) {
      if (tty) std::fputs("... ", stdout), std::fflush(stdout);
      if ((r = read_line(line)) != Read::line) return r;
      if (line == "\"\"\"") return Read::line;
      text += (text.empty() ? "" : "\n") + line;
    }
  }
  while (!line.empty() && line.back() == '\\') {
    line.pop_back();
    text += line + "\n";
    if (tty) std::fputs("... ", stdout), std::fflush(stdout);
    if ((r = read_line(line)) != Read::line) return r;
  }
  text += line;
  return Read::line;
}

void print_help() {
  std::fputs(
      "  /exit, /bye       leave (or Ctrl-D)\n"
      "  /clear            forget the conversation (the system message stays)\n"
      "  /system TEXT      set the system message (empty TEXT removes it)\n"
      "  /help             this list\n"
      "  \"\"\" ... \"\"\"       a multi-line message; or end a line with \\ to continue it\n"
      "  Ctrl-C            stop the answer being written\n",
      stdout);
}

class Conversation {
 public:
  Conversation(engine::EngineCore& core, const Tokenizer& tok, const chat::ChatFormatter& fmt, const ChatArgs& a)
      : core_(core), tok_(tok), fmt_(fmt), a_(a), system_(a.system) {}

  void clear() { turns_ = ordered_json::array(); }
  void set_system(std::string s) { system_ = std::move(s); }

  // Sends one user message and streams the answer to stdout.
  void say(const std::string& text) {
    turns_.push_back({{"role", "user"}, {"content", text}});
    ordered_json messages = ordered_json::array();
    if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
    for (const auto& t : turns_) messages.push_back(t);
    auto rendered = fmt_.render(messages, {});
    if (!rendered) return drop_last("chat template: " + rendered.error());
    engine::GenerationParams p;
    p.prompt = fmt_.tokenize(tok_, *rendered);
    const int32_t room = core_.stats().max_model_len - int32_t(p.prompt.size());
    if (room <= 1) return drop_last("the conversation no longer fits the context of " + std::to_string(a_.n_ctx) +
                                    " tokens: /clear it (or raise --ctx)");
    p.sampling = a_.sampling;
    p.sampling.seed = a_.sampling.seed + uint64_t(++n_turns_);
    p.stop = {.max_tokens = std::min(a_.n_predict, room - 1), .ignore_eos = a_.ignore_eos};
    auto id = core_.add_request(std::move(p));
    if (!id) return drop_last(id.error());
    std::string answer;
    engine::FinishReason finish = engine::FinishReason::None;
    std::vector<engine::Delta> deltas;
    while (core_.has_unfinished()) {
      if (g_interrupted.exchange(false)) core_.abort(*id);
      deltas.clear();
      if (auto s = core_.step(deltas); !s) {
        std::fprintf(stderr, "\nerror: %s\n", s.error().c_str());
        break;
      }
      for (const auto& d : deltas) {
        std::fwrite(d.text.data(), 1, d.text.size(), stdout);
        answer += d.text;
        if (d.finish != engine::FinishReason::None) finish = d.finish;
      }
      std::fflush(stdout);
    }
    std::fputs(finish == engine::FinishReason::Abort ? "\n[stopped]\n\n" : "\n\n", stdout);
    std::fflush(stdout);
    turns_.push_back({{"role", "assistant"}, {"content", answer}});
  }

 private:
  void drop_last(const std::string& why) {
    turns_.erase(turns_.size() - 1);
    std::fprintf(stderr, "error: %s\n", why.c_str());
  }

  engine::EngineCore& core_;
  const Tokenizer& tok_;
  const chat::ChatFormatter& fmt_;
  const ChatArgs& a_;
  std::string system_;
  ordered_json turns_ = ordered_json::array();
  int64_t n_turns_ = 0;
};

int run_chat(ChatArgs a) {
  a.model = model_path(a.model);
  auto model = load_model(a.model, a.quantize, a.threads);
  if (!model) return fail(model.error());
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return fail(a.model + ": " + tok.error());
  auto override_template = chat::chat_template_override(a.chat_template);
  if (!override_template) return fail(override_template.error());
  auto fmt = chat::ChatFormatter::for_model((*model)->gguf(), *tok, std::move(*override_template));
  if (!fmt) return fail(fmt.error());
  auto kv_type = parse_kv_type(a.kv_type);
  if (!kv_type) return fail(kv_type.error());
  block_sigint(SIG_BLOCK);  // before the engine's threads exist
  backends::ServingOptions o;
  o.engine.max_seqs = 1;
  o.engine.max_model_len = a.n_ctx;
  o.engine.num_threads = a.threads;
  auto kv_transform = calibrate_kv_cache(**model, *tok, *kv_type, a.n_ctx, "", a.threads, !a.kv_no_calibrate);
  if (!kv_transform) return fail(kv_transform.error());
  o.kv = {.n_blocks = (a.n_ctx + 15) / 16 + 1, .type = *kv_type, .transform = *kv_transform};
  auto device = cuda::parse_device(a.device);
  if (!device) return fail(device.error());
  o.device = *device;
  auto core = backends::create_engine_core(**model, *tok, o);
  if (!core) return fail(core.error());

  const bool tty = isatty(STDIN_FILENO);
  std::fprintf(stderr, "kvasir chat: %s, chat template: %s. /help for commands, Ctrl-D to leave.\n",
               a.model.c_str(), fmt->origin().c_str());
  catch_sigint();
  Conversation conv(**core, *tok, *fmt, a);
  std::string text;
  for (;;) {
    const Read r = read_input(text, tty);
    if (r == Read::eof) break;
    if (r == Read::interrupted) {
      std::fputs("\n(Ctrl-D or /exit to leave)\n", stdout);
      continue;
    }
    if (text.empty()) continue;
    if (text == "/exit" || text == "/bye" || text == "/quit") break;
    if (text == "/help" || text == "/?") {
      print_help();
    } else if (text == "/clear") {
      conv.clear();
      std::fputs("(conversation cleared)\n", stdout);
    } else if (text == "/system" || text.starts_with("/system ")) {
      conv.set_system(text.size() > 8 ? text.substr(8) : "");
      std::fputs("(system message set)\n", stdout);
    } else if (text[0] == '/' && text.find(' ') == std::string::npos && text.find('\n') == std::string::npos) {
      std::printf("unknown command %s (/help lists them)\n", text.c_str());
    } else {
      conv.say(text);
    }
    std::fflush(stdout);
  }
  if (tty) std::fputs("\n", stdout);
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("--system", a->system, "System message");
  cmd->add_option("--chat-template", a->chat_template,
                  "Jinja chat template file, or a built-in's name: chatml, gemma, llama2, llama3, mistral, phi3, plain");
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens per answer at most")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("-c,--ctx", a->n_ctx, "Context size in tokens (the whole conversation)")
      ->check(CLI::Range(64, 1 << 22));
  add_sampling_flags(cmd, a->sampling);  // --seed: each answer uses the next one
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N (the CUDA runner)");
  cmd->add_option("--quantize", a->quantize, "Quantize an F32/F16/BF16 model in memory at load (q8_0, q4_0, q4_k_m, ...): the same bytes as `kvasir quantize`");
  cmd->add_option("--kv-type", a->kv_type, "KV cache type: f16, f32, q8_0 or q4_0 (quantized K and V are stored in a basis calibrated at start-up)");
  cmd->add_flag("--kv-no-calibrate", a->kv_no_calibrate, "Store quantized K and V as they are (no KV calibration)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep answering past end-of-turn tokens (up to -n; for tests)");
  cmd->callback([&handler, a] { handler = [a] { return run_chat(*a); }; });
}

}  // namespace kvasir::cli
