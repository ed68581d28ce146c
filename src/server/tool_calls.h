// Tool calling: how a model family writes calls, the grammar that makes them well-formed (each
// function's arguments held to its parameters schema), and the parser that turns the answer into
// OpenAI's tool_calls, whole or as stream deltas.
//
//   hermes   Qwen 2.5 / Qwen 3 / Hermes:  <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//   llama3   Llama 3.x JSON:              {"name": ..., "parameters": {...}}
//   mistral  Mistral / Nemo:              [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
//   granite  Granite 3:                   <|tool_call|>[{"name": ..., "arguments": {...}}, ...]
//   generic  templates without tool syntax (Gemma, Phi-3, ...): {"tool_calls": [{"name", "arguments"}, ...]},
//            the format described to the model in a system message
// The family is read off the chat template's text. With tool_choice "auto" the grammar is lazy:
// free text until the family's trigger ("<tool_call>", "[TOOL_CALLS]", "{\"name\"", ...), then
// constrained; with "required" or a named function it applies from the first token.
//
// The parser needs no regular expressions: the grammar fixes each call's shape ("name" first, then
// the arguments value), so it scans for that shape and takes the arguments as one balanced JSON
// value, streaming its text as it arrives.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/json_schema.h"

namespace kvasir::server {

enum class ToolSyntax { hermes, llama3, mistral, granite, generic };

ToolSyntax tool_syntax_for(std::string_view chat_template);
const char* tool_syntax_name(ToolSyntax syntax);

struct Tool {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters;  // a JSON Schema of the arguments object
};

struct ToolChoice {
  enum class Mode { none, automatic, required, named };
  Mode mode = Mode::automatic;
  std::string name;  // Mode::named
};

struct ToolCallPlan {
  std::string gbnf;     // the tool-call section (trigger included)
  std::string trigger;  // where the section starts
  bool lazy = true;     // free text allowed before the trigger
};

// The grammar of the calls `choice` allows (named: that function only; parallel: one or more calls).
Result<ToolCallPlan> plan_tool_calls(ToolSyntax syntax, std::span<const Tool> tools, const ToolChoice& choice,
                                     bool parallel, grammar::JsonWhitespace whitespace = grammar::JsonWhitespace::bounded);

// For the generic syntax: the system text that describes the tools and the answer format.
std::string generic_tool_prompt(std::span<const Tool> tools);

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text, as OpenAI returns it
  bool complete = false;            // its arguments value closed (not cut by max_tokens)
};

class ToolCallParser {
 public:
  struct Event {
    enum class Kind { content, call, arguments };
    Kind kind = Kind::content;
    int32_t index = 0;  // call, arguments: which call
    std::string text;   // content or an arguments fragment; call: the function name
  };

  ToolCallParser(ToolSyntax syntax, std::string trigger, bool lazy);
  // New answer text -> events. Text that may be the start of the trigger is held back.
  void feed(std::string_view text, std::vector<Event>& out);
  // End of the answer: held-back text comes out as content.
  void finish(std::vector<Event>& out);
  const std::vector<ToolCall>& calls() const { return calls_; }
  // A call repeated an earlier one of this answer (same function, same arguments): it was left
  // out, nothing after it is read, and the answer should end here (a small model forced to call
  // tools would otherwise repeat the call until max_tokens). While a call may still turn out to be
  // such a repeat (its name and arguments so far an earlier call's), its events are held back.
  bool repeated() const { return repeated_; }

 private:
  void scan(std::vector<Event>& out);
  ToolSyntax syntax_;
  std::string trigger_;
  bool in_section_;
  std::string pending_;  // before the section: text not yet known to be content
  std::string section_;  // the tool-call section so far
  size_t pos_ = 0;       // scan position in section_
  int phase_ = 0;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, broken_ = false;
  size_t args_begin_ = 0;
  std::vector<ToolCall> calls_;
  bool repeated_ = false;
  std::vector<Event> held_;  // the current call's events while it may be a repeat
  bool holding_ = false;
  void hold_or_emit(Event e, std::vector<Event>& out);
};

}  // namespace kvasir::server
