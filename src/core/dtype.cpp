#include "core/dtype.h"

#include <cctype>

namespace kvasir {

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& row : kDTypeTable) {
    if (row.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i)
      same &= std::toupper(static_cast<unsigned char>(name[i])) == row.name[i];
    if (same) return row.type;
  }
  return std::nullopt;
}

}  // namespace kvasir
