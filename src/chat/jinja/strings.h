// Python str operations shared by the str methods and the filters.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::jinja::pystr {

// strip/lstrip/rstrip: `chars` nullopt strips whitespace (str.isspace), otherwise any of its characters.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; sep nullopt splits on runs of whitespace. maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace; count < 0: all. Fails (returns nullopt) if the result would exceed max_bytes.
std::optional<std::string> replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                                   size_t max_bytes);
std::string title(std::string_view s);       // str.title
std::string capitalize(std::string_view s);  // str.capitalize
std::string swapcase(std::string_view s);
// Code point offsets <-> byte offsets.
int64_t cp_index(std::string_view s, size_t byte_offset);
size_t byte_offset(std::string_view s, int64_t cp_index);

}  // namespace kvasir::jinja::pystr
