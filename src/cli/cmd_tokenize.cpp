// `kvasir tokenize` and `kvasir detokenize`: the model's tokenizer on the command line.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {

namespace {

// Only the metadata is read; the file stays mapped for the lifetime of the command.
Result<Tokenizer> load_tokenizer(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return Error{file.error()};
  auto g = gguf::parse(file->bytes());
  if (!g) return Error{path + ": " + g.error()};
  auto t = Tokenizer::from_gguf(*g);
  if (!t) return Error{path + ": " + t.error()};
  return t;
}

Result<std::string> read_input(const std::string& path) {
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Error{"cannot read " + path};
    ss << in.rdbuf();
  }
  return ss.str();
}

struct TokenizeArgs {
  std::string model, text, file;
  bool json = false, no_bos = false, no_special = false;
};

int run_tokenize(const TokenizeArgs& a, bool have_text) {
  std::string input;
  if (have_text) {
    input = a.text;
  } else {
    auto r = read_input(a.file);
    if (!r) return fail(r.error());
    input = std::move(r.value());
  }
  auto tok = load_tokenizer(model_path(a.model));
  if (!tok) return fail(tok.error());
  const std::vector<int32_t> ids = tok->encode(input, {.add_special = !a.no_bos, .parse_special = !a.no_special});
  std::string out = a.json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += a.json ? "," : " ";
    out += std::to_string(ids[i]);
  }
  out += a.json ? "]\n" : "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

struct DetokenizeArgs {
  std::string model, ids;
  bool skip_special = false;
};

int run_detokenize(const DetokenizeArgs& a) {
  auto ids = parse_id_list(a.ids);
  if (!ids) return fail(ids.error());
  auto tok = load_tokenizer(model_path(a.model));
  if (!tok) return fail(tok.error());
  for (int32_t id : *ids)
    if (!tok->valid_id(id))
      return fail("token id " + std::to_string(id) + " is out of range (the vocabulary has " +
                  std::to_string(tok->n_vocab()) + " tokens)");
  const std::string text = tok->decode(*ids, a.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

void register_tokenizer_commands(CLI::App& app, Handler& handler) {
  {
    auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
    auto a = std::make_shared<TokenizeArgs>();
    cmd->add_option("-m,--model", a->model, "GGUF model or vocabulary (default: the installed Gemma 3 270M)");
    auto* text = cmd->add_option("--text", a->text, "Text to tokenize");
    auto* file = cmd->add_option("--file", a->file, "File to tokenize ('-' for stdin)");
    cmd->add_flag("--json", a->json, "Print a JSON array");
    cmd->add_flag("--no-bos", a->no_bos, "Add no BOS/EOS (default: as the vocabulary says)");
    cmd->add_flag("--no-special", a->no_special, "Treat special-token strings such as <s> as plain text");
    cmd->callback([&handler, a, text, file] {
      const bool have_text = text->count() > 0;
      const bool have_file = file->count() > 0;
      handler = [a, have_text, have_file] {
        if (have_text == have_file) return fail("tokenize needs exactly one of --text and --file");
        return run_tokenize(*a, have_text);
      };
    });
  }
  {
    auto* cmd = app.add_subcommand("detokenize", "Print the text of token ids (exactly, without a newline)");
    auto a = std::make_shared<DetokenizeArgs>();
    cmd->add_option("-m,--model", a->model, "GGUF model or vocabulary (default: the installed Gemma 3 270M)");
    cmd->add_option("--ids", a->ids, "Comma-separated token ids, e.g. 1,2,3")->required();
    cmd->add_flag("--skip-special", a->skip_special, "Leave out control tokens such as BOS/EOS");
    cmd->callback([&handler, a] { handler = [a] { return run_detokenize(*a); }; });
  }
}

}  // namespace kvasir::cli
