#include "chat/jinja/jinja.h"

#include <ctime>
#include <exception>
#include <new>

#include "chat/jinja/error.h"
#include "chat/jinja/interpreter.h"
#include "chat/jinja/parser.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

struct ParsedTemplate {
  Body body;
};

namespace {

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail("RecursionError", "context nested more than " + std::to_string(kMaxValueDepth) + " deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) fail("OverflowError", "context integer too large (integers are limited to 64 bits)");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      MapBuilder b;
      for (const auto& [k, x] : j.items()) b.set(Value::string(k), from_json(x, depth + 1));
      return b.build();
    }
    default: return Value::none();  // binary / discarded: not produced by JSON text
  }
}

template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const JinjaError& e) {
    return Error{e.to_string()};
  } catch (const std::bad_alloc&) {
    return Error{"MemoryError: out of memory while rendering the template"};
  } catch (const std::exception& e) {
    return Error{std::string("InternalError: ") + e.what()};
  }
}

}  // namespace

std::tm make_time(int year, int month, int day, int hour, int minute, int second) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  std::time_t t = timegm(&tm);
  std::tm out{};
  gmtime_r(&t, &out);
  return out;
}

Result<Template> Template::parse(std::string_view source, const Limits& limits) {
  return guarded([&]() -> Result<Template> {
    if (!uni::is_valid_utf8(source)) fail("TemplateSyntaxError", "the template is not valid UTF-8");
    auto parsed = std::make_shared<ParsedTemplate>();
    parsed->body = jinja::parse(source, limits.max_nesting);
    Template t;
    t.parsed_ = std::move(parsed);
    return t;
  });
}

Result<std::string> Template::render(const nlohmann::ordered_json& context, const RenderConfig& config) const {
  return guarded([&]() -> Result<std::string> {
    if (!parsed_) fail("TemplateError", "rendering a template that was never parsed");
    if (!context.is_object() && !context.is_null()) fail("TypeError", "the context must be a JSON object");
    Interpreter in(config);
    auto globals = std::make_shared<Scope>();
    if (context.is_object()) {
      for (const auto& [k, v] : context.items()) globals->set(k, from_json(v, 1));
    }
    return in.render(parsed_->body, globals);
  });
}

Result<std::string> render(std::string_view source, const nlohmann::ordered_json& context, const RenderConfig& config) {
  auto t = Template::parse(source, config.limits);
  if (!t) return Error{t.error()};
  return t->render(context, config);
}

}  // namespace kvasir::jinja
