// Applying a model's chat template to a conversation, byte-identical to Hugging Face's
// apply_chat_template (Python Jinja2 in an ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks, loopcontrols, a json.dumps tojson, raise_exception and strftime_now).
//
// The context is a JSON object whose keys become template variables: messages,
// add_generation_prompt, bos_token, eos_token, tools (null when there are none) and any others a
// template reads (enable_thinking, documents, ...). Use nlohmann::ordered_json so objects keep their
// key order: templates print tools with tojson, and Python keeps insertion order.
#pragma once
#include <ctime>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/jinja/config.h"
#include "core/status.h"

namespace kvasir::chat {

struct RenderOptions {
  jinja::Limits limits;              // output size, work budget, nesting; see chat/jinja/config.h
  std::function<std::tm()> now;      // clock for strftime_now(); unset: the system's local time
};

// Errors (syntax errors, raise_exception, undefined values, exceeded limits) come back as Error with
// the Python exception name, the message and the template line and column.
Result<std::string> render_chat_template(std::string_view template_source, const nlohmann::ordered_json& context,
                                         const RenderOptions& options = {});

// Same, for a nlohmann::json context. nlohmann::json stores object keys sorted, so tools printed with
// tojson come out with sorted keys; prefer the ordered_json overload.
Result<std::string> render_chat_template(std::string_view template_source, const nlohmann::json& context,
                                         const RenderOptions& options = {});

}  // namespace kvasir::chat
