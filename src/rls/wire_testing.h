// Test helpers: protobuf wire format written and read by hand, from field numbers alone, so that
// tests can check sluice's .proto files (and the bytes on a gRPC port) against the field tables
// of docs/rls.md without trusting generated code. Only what RLS and health need:
// varint (wire type 0) and length-delimited (wire type 2) fields.

#ifndef SLUICE_RLS_WIRE_TESTING_H_
#define SLUICE_RLS_WIRE_TESTING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::rls::wire {

inline std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

inline constexpr int kVarint = 0;  // wire types
inline constexpr int kLen = 2;

inline std::string VarintField(uint32_t number, uint64_t value) {
  std::string out = Varint((uint64_t{number} << 3) | kVarint);
  out += Varint(value);
  return out;
}

inline std::string LenField(uint32_t number, std::string_view payload) {
  std::string out = Varint((uint64_t{number} << 3) | kLen);
  out += Varint(payload.size());
  out.append(payload);
  return out;
}

struct WireField {
  uint32_t number = 0;
  int wire_type = -1;
  uint64_t varint = 0;
  std::string bytes;
};

// Decodes one message level. Only varint and length-delimited fields are expected in RLS;
// anything else is a test failure.
inline std::vector<WireField> Decode(std::string_view in) {
  std::vector<WireField> out;
  size_t pos = 0;
  const auto read_varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= in.size()) return false;
      const auto byte = static_cast<uint8_t>(in[pos++]);
      *v |= uint64_t{byte & 0x7Fu} << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  };
  while (pos < in.size()) {
    uint64_t key = 0;
    if (!read_varint(&key)) {
      ADD_FAILURE() << "truncated key";
      return out;
    }
    WireField f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    if (f.wire_type == kVarint) {
      if (!read_varint(&f.varint)) ADD_FAILURE() << "truncated varint";
    } else if (f.wire_type == kLen) {
      uint64_t size = 0;
      if (!read_varint(&size) || size > in.size() - pos) {
        ADD_FAILURE() << "bad length";
        return out;
      }
      f.bytes = std::string(in.substr(pos, size));
      pos += size;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire_type << " for field " << f.number;
      return out;
    }
    out.push_back(std::move(f));
  }
  return out;
}

inline std::vector<std::pair<uint32_t, int>> Shape(const std::vector<WireField>& fields) {
  std::vector<std::pair<uint32_t, int>> out;
  for (const WireField& f : fields) out.emplace_back(f.number, f.wire_type);
  return out;
}

}  // namespace sluice::rls::wire

#endif  // SLUICE_RLS_WIRE_TESTING_H_
