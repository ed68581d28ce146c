// `kvasir chat-template (-m MODEL.gguf | --template FILE.jinja) --case FILE.json`: renders one
// conversation with a chat template and prints exactly the rendering, nothing added. With -m the
// template is the model's tokenizer.chat_template (its family's built-in template when it has none)
// and a case without bos_token/eos_token gets the model's BOS/EOS token strings. --template also
// takes a built-in template's name (chatml, gemma, llama2, llama3, mistral, phi3, plain).
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/builtin_templates.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {

namespace {

using ordered_json = nlohmann::ordered_json;

struct ChatTemplateArgs {
  std::string model, template_path, case_path, case_name, now;
};

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read " + path};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The case object: the file's object, or the entry named `name` of a list of cases.
Result<ordered_json> load_case(const std::string& path, const std::string& name) {
  auto text = read_file(path);
  if (!text) return Error{text.error()};
  ordered_json doc = ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error{path + ": not valid JSON"};
  if (doc.is_array()) {
    if (name.empty()) {
      return Error{path + " holds " + std::to_string(doc.size()) + " cases; pick one with --case-name"};
    }
    for (auto& c : doc) {
      if (c.is_object() && c.contains("name") && c["name"].is_string() && c["name"].get<std::string>() == name) return c;
    }
    return Error{path + ": no case named '" + name + "'"};
  }
  if (!doc.is_object()) return Error{path + ": expected a JSON object with messages"};
  return doc;
}

struct ModelTemplate {
  std::string source;
  std::string bos, eos;  // empty when the model does not name them
  bool has_bos = false, has_eos = false;
};

Result<ModelTemplate> load_model_template(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return Error{file.error()};
  auto g = gguf::parse(file->bytes());
  if (!g) return Error{path + ": " + g.error()};
  ModelTemplate out;
  if (g->find("tokenizer.chat_template")) {
    auto t = g->get_string("tokenizer.chat_template");
    if (!t) return Error{path + ": " + t.error()};
    out.source = std::move(*t);
  } else {
    auto tok = Tokenizer::from_gguf(*g);
    if (!tok) return Error{path + ": " + tok.error()};
    auto arch = g->get_string("general.architecture");
    out.source = std::string(chat::choose_builtin_template(arch ? *arch : "", [&](std::string_view text) {
                               const int32_t id = tok->token_to_id(text);
                               return id >= 0 && tok->is_special(id);
                             }).source);
  }
  auto tokens = g->get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING);
  if (!tokens) return out;  // no vocabulary: leave bos/eos to the case
  auto token = [&](const char* key, std::string& dst, bool& has) -> Status {
    if (!g->find(key)) return Status{};
    auto id = g->get_int(key);
    if (!id) return Error{path + ": " + id.error()};
    const auto& items = (*tokens)->items;
    if (*id < 0 || static_cast<uint64_t>(*id) >= items.size()) {
      return Error{path + ": " + key + " = " + std::to_string(*id) + " is outside the vocabulary of " +
                   std::to_string(items.size()) + " tokens"};
    }
    dst = items[static_cast<size_t>(*id)].str;
    has = true;
    return Status{};
  };
  if (auto s = token("tokenizer.ggml.bos_token_id", out.bos, out.has_bos); !s) return Error{s.error()};
  if (auto s = token("tokenizer.ggml.eos_token_id", out.eos, out.has_eos); !s) return Error{s.error()};
  return out;
}

Result<std::tm> parse_now(const std::string& text) {
  std::tm tm{};
  int y, mo, d, h, mi, s;
  char sep;
  if (std::sscanf(text.c_str(), "%d-%d-%d%c%d:%d:%d", &y, &mo, &d, &sep, &h, &mi, &s) != 7 || (sep != ' ' && sep != 'T')) {
    return Error{"--now wants 'YYYY-MM-DD HH:MM:SS', got '" + text + "'"};
  }
  tm = jinja::make_time(y, mo, d, h, mi, s);
  return tm;
}

int run_chat_template(const ChatTemplateArgs& a) {
  if (a.model.empty() == a.template_path.empty()) return fail("give exactly one of -m MODEL.gguf or --template FILE");
  auto c = load_case(a.case_path, a.case_name);
  if (!c) return fail(c.error());
  ordered_json context;
  for (auto& [k, v] : c->items()) {
    if (k != "name" && k != "expected" && k != "error") context[k] = v;
  }
  std::string source;
  if (const auto* named = chat::find_builtin_template(a.template_path)) {
    source = std::string(named->source);
  } else if (!a.template_path.empty()) {
    auto t = read_file(a.template_path);
    if (!t) return fail(t.error());
    source = std::move(*t);
  } else {
    auto m = load_model_template(a.model);
    if (!m) return fail(m.error());
    source = std::move(m->source);
    auto missing = [&](const char* key) { return !context.contains(key) || context[key].is_null(); };
    if (m->has_bos && missing("bos_token")) context["bos_token"] = m->bos;
    if (m->has_eos && missing("eos_token")) context["eos_token"] = m->eos;
  }
  chat::RenderOptions options;
  if (!a.now.empty()) {
    auto now = parse_now(a.now);
    if (!now) return fail(now.error());
    std::tm fixed = *now;
    options.now = [fixed] { return fixed; };
  }
  auto out = chat::render_chat_template(source, context, options);
  if (!out) return fail(out.error());
  std::fwrite(out->data(), 1, out->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void register_chat_template(CLI::App& app, Handler& handler) {
  auto* cmd = app.add_subcommand("chat-template", "Render a conversation with a model's chat template");
  auto a = std::make_shared<ChatTemplateArgs>();
  auto* model = cmd->add_option("-m,--model", a->model,
                                "GGUF model: its tokenizer.chat_template (its family's built-in one if it has none) and BOS/EOS tokens");
  auto* tmpl = cmd->add_option("--template", a->template_path, "Jinja template file, or a built-in template's name (chatml, gemma, llama2, llama3, mistral, phi3, plain)");
  model->excludes(tmpl);
  cmd->add_option("--case", a->case_path,
                  "JSON object: messages, add_generation_prompt, bos_token, eos_token, tools, ...")
      ->required();
  cmd->add_option("--case-name", a->case_name, "When the file is a list of cases (*.cases.json), the one to render");
  cmd->add_option("--now", a->now, "Fixed local time for strftime_now(), 'YYYY-MM-DD HH:MM:SS'");
  cmd->callback([&handler, a] { handler = [a] { return run_chat_template(*a); }; });
}

}  // namespace kvasir::cli
