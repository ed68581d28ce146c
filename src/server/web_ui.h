// The chat page served at "/": plain HTML, CSS and JavaScript in one string, no build step. It
// streams /v1/chat/completions with fetch, parses the SSE itself and shows tokens per second.
#pragma once
#include <string_view>

namespace kvasir::server {

std::string_view web_ui_html();

}  // namespace kvasir::server
