#include "chat/chat_template.h"

#include <exception>

#include "chat/jinja/jinja.h"

namespace kvasir::chat {

Result<std::string> render_chat_template(std::string_view template_source, const nlohmann::ordered_json& context,
                                         const RenderOptions& options) {
  jinja::RenderConfig config;
  config.limits = options.limits;
  config.now = options.now;
  return jinja::render(template_source, context, config);
}

Result<std::string> render_chat_template(std::string_view template_source, const nlohmann::json& context,
                                         const RenderOptions& options) {
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json(context);  // converts between the two json types, keys stay sorted
  } catch (const std::exception& e) {
    return Error{std::string("TypeError: cannot use the context: ") + e.what()};
  }
  return render_chat_template(template_source, ordered, options);
}

}  // namespace kvasir::chat
