#include "server/tool_setup.h"

#include "chat/tool_messages.h"

namespace kvasir::server {

Parsed<ToolSetup> prepare_tools(const Backend& b, const std::vector<Tool>& tools, const ToolChoice& choice, bool parallel,
                                const std::optional<OutputFormat>& format, ordered_json& messages,
                                std::shared_ptr<const grammar::CompiledGrammar>& grammar) {
  ToolSetup out;
  // Only conversations that carry tool calls or results are reshaped (for templates without tool syntax).
  if (b.tool_syntax == ToolSyntax::generic && chat::has_tool_messages(messages)) chat::generic_tool_history(messages);
  if (tools.empty() || choice.mode == ToolChoice::Mode::none) return out;
  if (format) return bad_request("'" + format->param + "' cannot be combined with 'tools'", format->param);
  const ToolSyntax syntax = b.tool_syntax;
  auto plan = plan_tool_calls(syntax, tools, choice, parallel, b.grammars->whitespace());
  if (!plan) return bad_request(plan.error(), "tools", "invalid_grammar");
  auto g = b.grammars->get({engine::GrammarSpec::Kind::gbnf, plan->gbnf});
  if (!g) return bad_request(g.error(), "tools", "invalid_grammar");
  grammar = *g;
  if (plan->lazy) out.trigger = plan->trigger;
  out.context = ToolContext{syntax, plan->trigger, plan->lazy};
  if (syntax == ToolSyntax::generic) chat::add_tool_prompt(messages, generic_tool_prompt(tools), b.chat);
  return out;
}

std::vector<ToolCallParser::Event> parse_delta(ToolCallParser& parser, GenerationJob& job, int32_t choice,
                                               engine::Delta& d) {
  std::vector<ToolCallParser::Event> events;
  parser.feed(d.text, events);
  if (parser.repeated() && d.finish == engine::FinishReason::None) {  // the answer ends with its calls
    job.stop(choice);
    d.finish = engine::FinishReason::Stop;
  }
  if (d.finish != engine::FinishReason::None) parser.finish(events);
  return events;
}

std::string content_of(const std::vector<ToolCallParser::Event>& events) {
  std::string content;
  for (const auto& e : events)
    if (e.kind == ToolCallParser::Event::Kind::content) content += e.text;
  return content;
}

}  // namespace kvasir::server
