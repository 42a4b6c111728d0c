// libFuzzer target for the HTTP side's parsers of client-controlled text that need no socket:
// X-Forwarded-For, read through trusted proxies (http::ClientAddress, whose answer becomes the
// `remote_address` descriptor value of forward-auth and the reverse proxy), the addresses and
// CIDRs it is checked against (rules::ParseCidr), and the admin API's `descriptors=k=v,k=v;k=v`
// (engine::ParseDescriptorList).
//
// Input, split at '\n': the peer address; the trusted proxies, comma-separated (the ones that do
// not parse are left out); then one X-Forwarded-For field per line. The whole input is also a
// descriptor list.
//
// Contracts checked: the client address is the peer or one of the forwarded hops, as sent (no
// text is made up); a parsed descriptor list has one descriptor per ';'-separated part, and every
// entry a non-empty key.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/descriptor_text.h"
#include "engine/engine.h"
#include "http/http_routes.h"
#include "rules/config.h"
#include "rules/parsers.h"

namespace {

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

void FuzzClientAddress(std::string_view input) {
  std::vector<std::string_view> lines = Split(input, '\n');
  const std::string_view peer = lines[0];
  std::vector<sluice::rules::Cidr> trusted;
  if (lines.size() > 1) {
    for (std::string_view proxy : Split(lines[1], ',')) {
      if (auto cidr = sluice::rules::ParseCidr(proxy)) trusted.push_back(*cidr);
    }
  }
  const std::vector<std::string_view> forwarded(lines.begin() + std::min<size_t>(2, lines.size()),
                                                lines.end());
  const std::string client = sluice::http::ClientAddress(peer, forwarded, trusted);
  if (client == peer) return;
  if (trusted.empty()) abort();  // nobody to believe, yet not the peer
  // Otherwise a hop of some field: text from that field.
  const bool from_a_field = std::any_of(
      forwarded.begin(), forwarded.end(),
      [&](std::string_view field) { return field.find(client) != std::string_view::npos; });
  if (!from_a_field || client.find(',') != std::string::npos) abort();
}

void FuzzDescriptorList(std::string_view input) {
  std::string error;
  const auto descriptors = sluice::engine::ParseDescriptorList(input, &error);
  if (!descriptors) {
    if (error.empty()) abort();
    return;
  }
  if (descriptors->size() != static_cast<size_t>(std::count(input.begin(), input.end(), ';')) + 1) {
    abort();
  }
  for (const sluice::engine::Descriptor& d : *descriptors) {
    if (d.entries.empty()) abort();
    for (const sluice::rules::Entry& e : d.entries) {
      if (e.key.empty()) abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  FuzzClientAddress(input);
  FuzzDescriptorList(input);
  return 0;
}
