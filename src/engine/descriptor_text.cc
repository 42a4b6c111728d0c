#include "engine/descriptor_text.h"

#include "fmt/format.h"

namespace sluice::engine {

std::optional<Descriptors> ParseDescriptorList(std::string_view text, std::string* error) {
  Descriptors out;
  if (text.empty()) {
    *error = "empty descriptor list";
    return std::nullopt;
  }
  for (std::string_view rest = text;;) {
    const size_t semi = rest.find(';');
    std::string_view one = rest.substr(0, semi);
    Descriptor d;
    for (std::string_view entries = one;;) {
      const size_t comma = entries.find(',');
      const std::string_view entry = entries.substr(0, comma);
      const size_t eq = entry.find('=');
      if (eq == std::string_view::npos || eq == 0) {
        *error = fmt::format("bad descriptor entry '{}' (expected k=v,k=v;k=v)", entry);
        return std::nullopt;
      }
      d.entries.push_back({std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1))});
      if (comma == std::string_view::npos) break;
      entries.remove_prefix(comma + 1);
    }
    out.push_back(std::move(d));
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  return out;
}

}  // namespace sluice::engine
