// A small, sandboxed Jinja2 interpreter that renders chat templates the way Hugging Face does
// (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols). This is the
// lower-level API; chat/chat_template.h wraps it for chat messages.
//
// Nothing here throws: parse and render errors come back as Error, formatted
// "<Python exception name>: <message> (line L, column C)".
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/jinja/config.h"
#include "core/status.h"

namespace kvasir::jinja {

struct ParsedTemplate;

class Template {
 public:
  // Parses once; a Template can then be rendered any number of times, from any thread.
  static Result<Template> parse(std::string_view source, const Limits& limits = {});

  // `context` must be a JSON object; its keys become the template's top-level variables. JSON object
  // key order is kept (Python dicts keep insertion order, and tojson/items show it).
  Result<std::string> render(const nlohmann::ordered_json& context, const RenderConfig& config = {}) const;

 private:
  std::shared_ptr<const ParsedTemplate> parsed_;
};

// parse + render in one call.
Result<std::string> render(std::string_view source, const nlohmann::ordered_json& context,
                           const RenderConfig& config = {});

}  // namespace kvasir::jinja
