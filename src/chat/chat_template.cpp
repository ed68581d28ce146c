#include "chat/chat_template.h"

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
  return render_chat_template(template_source, nlohmann::ordered_json::parse(context.dump()), options);
}

}  // namespace kvasir::chat
