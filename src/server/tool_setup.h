// A chat request's tools, for every API that takes them (chat completions, Ollama's /api/chat):
// the call grammar from the functions' schemas, the trigger that starts it, and for templates
// without tool syntax the system text that describes the tools and the rewritten history.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/protocol.h"
#include "server/state.h"
#include "server/tool_calls.h"

namespace kvasir::server {

// How a request's answers are parsed for calls.
struct ToolContext {
  ToolSyntax syntax = ToolSyntax::generic;
  std::string trigger;
  bool lazy = true;
  ToolCallParser parser() const { return ToolCallParser(syntax, trigger, lazy); }
};

struct ToolSetup {
  std::optional<ToolContext> context;  // none: no tools (or tool_choice "none")
  std::string trigger;                 // the engine's grammar trigger (empty: the grammar applies at once)
};

// Reshapes `messages` for the model's tool syntax and, when tools apply, puts the call grammar in
// `grammar`. 400s name `tools` (a schema it cannot hold to) or the output format it conflicts with.
Parsed<ToolSetup> prepare_tools(const Backend& b, const std::vector<Tool>& tools, const ToolChoice& choice, bool parallel,
                                const std::optional<OutputFormat>& format, ordered_json& messages,
                                std::shared_ptr<const grammar::CompiledGrammar>& grammar);

// A delta's text through its choice's parser: the events. A call that repeats an earlier one ends
// the choice now (its engine request stops, `d.finish` becomes Stop); at the end held-back text
// comes out.
std::vector<ToolCallParser::Event> parse_delta(ToolCallParser& parser, GenerationJob& job, int32_t choice,
                                               engine::Delta& d);
// The content (text that is not a call) of some events.
std::string content_of(const std::vector<ToolCallParser::Event>& events);

}  // namespace kvasir::server
