#include "chat/tool_messages.h"

namespace kvasir::chat {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string dump(const ordered_json& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

bool has_tool_messages(const ordered_json& messages) {
  if (!messages.is_array()) return false;
  for (const auto& m : messages) {
    if (!m.is_object()) continue;
    if (m.value("role", "") == "tool" || (m.contains("tool_calls") && !m["tool_calls"].is_null())) return true;
  }
  return false;
}

void add_tool_prompt(ordered_json& messages, const std::string& text, const ChatFormatter& chat) {
  ordered_json with_system = messages;
  if (!with_system.empty() && with_system[0].value("role", "") == "system" && with_system[0]["content"].is_string())
    with_system[0]["content"] = with_system[0]["content"].get<std::string>() + "\n\n" + text;
  else
    with_system.insert(with_system.begin(), ordered_json{{"role", "system"}, {"content", text}});
  if (chat.render(with_system, ChatRenderOptions{}).ok()) {
    messages = std::move(with_system);
    return;
  }
  for (auto& m : messages)
    if (m.value("role", "") == "user" && m["content"].is_string()) {
      m["content"] = text + "\n\n" + m["content"].get<std::string>();
      return;
    }
}

void generic_tool_history(ordered_json& messages) {
  ordered_json out = ordered_json::array();
  for (auto& m : messages) {
    const std::string role = m.value("role", "");
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
      ordered_json calls = ordered_json::array();
      for (const auto& c : m["tool_calls"])
        if (c.is_object() && c.contains("function") && c["function"].is_object())
          calls.push_back({{"name", c["function"].value("name", "")}, {"arguments", c["function"].value("arguments", ordered_json::object())}});
      std::string text = m["content"].is_string() ? m["content"].get<std::string>() : "";
      text += (text.empty() ? "" : "\n") + dump({{"tool_calls", calls}});
      out.push_back({{"role", "assistant"}, {"content", text}});
    } else if (role == "tool") {
      const std::string result = "Tool result: " + (m["content"].is_string() ? m["content"].get<std::string>() : dump(m["content"]));
      if (!out.empty() && out.back()["role"] == "user" && out.back().value("tool_results", false))
        out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + result;
      else
        out.push_back({{"role", "user"}, {"content", result}, {"tool_results", true}});
    } else {
      out.push_back(std::move(m));
    }
  }
  for (auto& m : out) m.erase("tool_results");
  messages = std::move(out);
}

}  // namespace kvasir::chat
