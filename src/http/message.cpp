#include "http/message.h"

#include <algorithm>
#include <cctype>

namespace kvasir::http {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

const std::string& Headers::get(std::string_view name) const {
  static const std::string kNone;
  for (const auto& [n, v] : fields_)
    if (iequals(n, name)) return v;
  return kNone;
}

bool Headers::has(std::string_view name) const {
  return std::any_of(fields_.begin(), fields_.end(), [&](const auto& f) { return iequals(f.first, name); });
}

void Headers::set(std::string name, std::string value) {
  std::erase_if(fields_, [&](const auto& f) { return iequals(f.first, name); });
  fields_.emplace_back(std::move(name), std::move(value));
}

}  // namespace kvasir::http
