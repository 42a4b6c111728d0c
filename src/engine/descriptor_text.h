// The text form of descriptors, `k=v,k=v;k=v`, as replay, explain and the admin API take them.

#ifndef SLUICE_ENGINE_DESCRIPTOR_TEXT_H_
#define SLUICE_ENGINE_DESCRIPTOR_TEXT_H_

#include <optional>
#include <string>
#include <string_view>

#include "engine/engine.h"

namespace sluice::engine {

// Parses the text form of descriptors, `k=v,k=v;k=v` (descriptors separated by ';', entries by
// ','; the value is everything after the first '='), as used by replay, explain and the admin
// API. nullopt and *error on malformed input.
std::optional<Descriptors> ParseDescriptorList(std::string_view text, std::string* error);

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_DESCRIPTOR_TEXT_H_
