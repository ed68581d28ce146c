// Server-sent events as OpenAI streams them: one "data: <json>" event per chunk, a blank line after
// each, and a final "data: [DONE]".
#pragma once
#include <string>
#include <string_view>

namespace kvasir::server {

inline std::string sse_event(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  out += "data: ";
  out += data;
  out += "\n\n";
  return out;
}

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace kvasir::server
