#include "server/tool_calls.h"

#include <random>

#include "grammar/json_schema.h"

namespace kvasir::server {
namespace {

using json = nlohmann::ordered_json;

const char* trigger_of(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::hermes: return "<tool_call>";
    case ToolSyntax::llama3: return "{\"name\"";
    case ToolSyntax::mistral: return "[TOOL_CALLS]";
    case ToolSyntax::granite: return "<|tool_call|>";
    case ToolSyntax::generic: return "{\"tool_calls\"";
  }
  return "";
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string random_id(ToolSyntax syntax) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  // Mistral's template insists on 9-character ids when the calls come back in the conversation.
  const size_t n = syntax == ToolSyntax::mistral ? 9 : 24;
  std::string id = syntax == ToolSyntax::mistral ? "" : "call_";
  for (size_t i = 0; i < n; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

}  // namespace

ToolSyntax tool_syntax_for(std::string_view t) {
  if (t.find("<tool_call>") != std::string_view::npos) return ToolSyntax::hermes;
  if (t.find("[TOOL_CALLS]") != std::string_view::npos) return ToolSyntax::mistral;
  if (t.find("<|tool_call|>") != std::string_view::npos) return ToolSyntax::granite;
  if (t.find("\"parameters\"") != std::string_view::npos &&
      (t.find("ipython") != std::string_view::npos || t.find("<|eot_id|>") != std::string_view::npos))
    return ToolSyntax::llama3;
  return ToolSyntax::generic;
}

const char* tool_syntax_name(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::hermes: return "hermes";
    case ToolSyntax::llama3: return "llama3";
    case ToolSyntax::mistral: return "mistral";
    case ToolSyntax::granite: return "granite";
    case ToolSyntax::generic: return "generic";
  }
  return "";
}

Result<ToolCallPlan> plan_tool_calls(ToolSyntax syntax, std::span<const Tool> tools, const ToolChoice& choice,
                                     bool parallel, grammar::JsonWhitespace whitespace) {
  grammar::SchemaGrammar sg(whitespace);
  std::string calls;
  const std::string key = syntax == ToolSyntax::llama3 ? "\"parameters\"" : "\"arguments\"";
  for (const Tool& t : tools) {
    if (choice.mode == ToolChoice::Mode::named && t.name != choice.name) continue;
    const json params = t.parameters.is_null() ? json{{"type", "object"}} : t.parameters;
    auto args = sg.add(params, "args-" + t.name);
    if (!args) return Error{"function '" + t.name + "': " + args.error(), ErrorCode::invalid_argument};
    calls += std::string(calls.empty() ? "" : " | ") + "\"{\" ws " + grammar::gbnf_literal("\"name\"") +
             " ws \":\" ws " + grammar::gbnf_literal(json(t.name).dump()) + " ws \",\" ws " +
             grammar::gbnf_literal(key) + " ws \":\" ws " + *args + " ws \"}\"";
  }
  if (calls.empty()) return Error{"tool_choice names no function of 'tools'", ErrorCode::invalid_argument};
  const std::string trigger = trigger_of(syntax);
  const std::string open = grammar::gbnf_literal(trigger);
  std::string root;
  switch (syntax) {
    case ToolSyntax::hermes: {
      const std::string one = open + " ws tool-call ws \"</tool_call>\"";
      root = one + (parallel ? " ( ws " + one + " )*" : "");
      break;
    }
    case ToolSyntax::mistral:
    case ToolSyntax::granite:
      root = open + " ws \"[\" ws tool-call" + std::string(parallel ? " ( ws \",\" ws tool-call )*" : "") + " ws \"]\"";
      break;
    case ToolSyntax::llama3:
      root = "tool-call";  // the template takes one call per turn
      break;
    case ToolSyntax::generic:
      root = "\"{\" ws \"\\\"tool_calls\\\"\" ws \":\" ws \"[\" ws tool-call" +
             std::string(parallel ? " ( ws \",\" ws tool-call )*" : "") + " ws \"]\" ws \"}\"";
      break;
  }
  ToolCallPlan plan;
  plan.gbnf = sg.gbnf(root) + "tool-call ::= " + calls + "\n";
  plan.trigger = trigger;
  plan.lazy = choice.mode == ToolChoice::Mode::automatic;
  return plan;
}

std::string generic_tool_prompt(std::span<const Tool> tools) {
  json list = json::array();
  for (const Tool& t : tools) {
    json item{{"name", t.name}};
    if (!t.description.empty()) item["description"] = t.description;
    item["parameters"] = t.parameters.is_null() ? json{{"type", "object"}} : t.parameters;
    list.push_back(std::move(item));
  }
  return "You can call these tools (each with a JSON Schema of its arguments):\n" +
         list.dump(-1, ' ', false, json::error_handler_t::replace) +
         "\nTo call tools, answer with only this JSON and nothing else: "
         "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]}";
}

ToolCallParser::ToolCallParser(ToolSyntax syntax, std::string trigger, bool lazy)
    : syntax_(syntax), trigger_(std::move(trigger)), in_section_(!lazy) {}

void ToolCallParser::feed(std::string_view text, std::vector<Event>& out) {
  if (in_section_) {
    section_ += text;
    return scan(out);
  }
  pending_ += text;
  const size_t at = pending_.find(trigger_);
  if (at != std::string::npos) {
    if (at > 0) out.push_back({Event::Kind::content, 0, pending_.substr(0, at)});
    section_ = pending_.substr(at);
    pending_.clear();
    in_section_ = true;
    return scan(out);
  }
  // Hold back the longest tail that could still become the trigger.
  size_t keep = std::min(pending_.size(), trigger_.size() - 1);
  while (keep > 0 && pending_.compare(pending_.size() - keep, keep, trigger_, 0, keep) != 0) --keep;
  if (pending_.size() > keep) {
    out.push_back({Event::Kind::content, 0, pending_.substr(0, pending_.size() - keep)});
    pending_.erase(0, pending_.size() - keep);
  }
}

void ToolCallParser::finish(std::vector<Event>& out) {
  if (!pending_.empty()) out.push_back({Event::Kind::content, 0, std::move(pending_)});
  pending_.clear();
  // A section that is not a call after all (malformed: text that only looked like the start of
  // one) is shown as it was written; one cut by max_tokens before its first call is not.
  if (in_section_ && calls_.empty() && broken_ && !section_.empty()) out.push_back({Event::Kind::content, 0, section_});
}

namespace {

// JSON text without the blanks between tokens, so that `{"a": 1}` and `{"a":1}` compare equal.
std::string squeeze(std::string_view json_text) {
  std::string out;
  bool in_string = false, escaped = false;
  for (char c : json_text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (is_space(c)) {
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

// The current call's events go out, unless it may still be a repeat of an earlier complete call:
// the same name, and its arguments so far a prefix of that call's.
void ToolCallParser::hold_or_emit(Event e, std::vector<Event>& out) {
  if (!holding_) return out.push_back(std::move(e));
  const ToolCall& now = calls_.back();
  const std::string so_far = squeeze(now.arguments);
  bool may_repeat = false;
  for (size_t i = 0; i + 1 < calls_.size() && !may_repeat; ++i)
    may_repeat = calls_[i].complete && calls_[i].name == now.name && squeeze(calls_[i].arguments).starts_with(so_far);
  held_.push_back(std::move(e));
  if (may_repeat) return;
  holding_ = false;
  for (Event& h : held_) out.push_back(std::move(h));
  held_.clear();
}

// Phases: 0 find "name", 1 ':', 2 '"', 3 the name, 4 ',', 5 the arguments key, 6 ':', 7 the value's
// start, 8 inside the value (a balanced JSON value, streamed as it comes).
void ToolCallParser::scan(std::vector<Event>& out) {
  const std::string& s = section_;
  auto skip_space = [&] {
    while (pos_ < s.size() && is_space(s[pos_])) ++pos_;
    return pos_ < s.size();
  };
  while (!broken_ && !repeated_ && pos_ < s.size()) {
    switch (phase_) {
      case 0: {
        const size_t at = s.find("\"name\"", pos_);
        if (at == std::string::npos) {
          pos_ = std::max(pos_, s.size() >= 5 ? s.size() - 5 : size_t(0));
          return;
        }
        pos_ = at + 6;
        phase_ = 1;
        break;
      }
      case 1:
      case 4:
      case 6: {
        if (!skip_space()) return;
        const char want = phase_ == 4 ? ',' : ':';
        if (s[pos_] != want) {
          broken_ = true;
          return;
        }
        ++pos_;
        ++phase_;
        break;
      }
      case 2:
      case 5: {
        if (!skip_space()) return;
        if (s[pos_] != '"') {
          broken_ = true;
          return;
        }
        const size_t close = s.find('"', pos_ + 1);
        if (close == std::string::npos) return;  // the rest of the string is still to come
        const std::string word = s.substr(pos_ + 1, close - pos_ - 1);
        pos_ = close + 1;
        if (phase_ == 2) {
          calls_.push_back({random_id(syntax_), word, "", false});
          holding_ = true;
          held_.clear();
          hold_or_emit({Event::Kind::call, int32_t(calls_.size() - 1), word}, out);
          phase_ = 4;
        } else {
          if (word != "arguments" && word != "parameters") {
            broken_ = true;
            return;
          }
          phase_ = 6;
        }
        break;
      }
      case 7:
        if (!skip_space()) return;
        args_begin_ = pos_;
        depth_ = 0;
        in_string_ = escaped_ = false;
        phase_ = 8;
        break;
      case 8: {
        const size_t from = pos_;
        bool ended = false;
        for (; pos_ < s.size() && !ended; ++pos_) {
          const char c = s[pos_];
          if (in_string_) {
            if (escaped_) escaped_ = false;
            else if (c == '\\') escaped_ = true;
            else if (c == '"') in_string_ = false;
          } else if (c == '"') {
            in_string_ = true;
          } else if (c == '{' || c == '[') {
            ++depth_;
          } else if (c == '}' || c == ']') {
            ended = --depth_ == 0;
          }
        }
        if (pos_ > from) {
          calls_.back().arguments.append(s, from, pos_ - from);
          hold_or_emit({Event::Kind::arguments, int32_t(calls_.size() - 1), s.substr(from, pos_ - from)}, out);
        }
        if (ended) {
          phase_ = 0;
          calls_.back().complete = true;
          if (holding_) {  // every byte matched an earlier call's, and it closed: a repeat
            calls_.pop_back();
            held_.clear();
            holding_ = false;
            repeated_ = true;
          }
        }
        break;
      }
    }
  }
}

}  // namespace kvasir::server
