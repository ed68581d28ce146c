// Tool messages for chat templates: what a conversation with tool calls and results becomes for a
// template without tool syntax, and where the tools' description goes. Pure JSON transforms.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"

namespace kvasir::chat {

// Whether any message is a tool result or an assistant turn with tool calls.
bool has_tool_messages(const nlohmann::ordered_json& messages);

// Tells the model about the tools: appended to the conversation's system message (a new one first
// when there is none); when the template refuses a system role (Gemma), put before the first user
// message's text instead.
void add_tool_prompt(nlohmann::ordered_json& messages, const std::string& text, const ChatFormatter& chat);

// For templates without tool syntax: calls become the assistant's JSON answer, and each run of
// tool results one user turn, so that a template that only knows user/assistant can render them.
void generic_tool_history(nlohmann::ordered_json& messages);

}  // namespace kvasir::chat
