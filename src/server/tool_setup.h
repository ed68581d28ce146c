// A chat request's tools, for every API that takes them (chat completions, Ollama's /api/chat):
// the call grammar from the functions' schemas, the trigger that starts it, and for templates
// without tool syntax the system text that describes the tools and the rewritten history.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

}  // namespace kvasir::server
