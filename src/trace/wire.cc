#include "trace/wire.h"

#include <algorithm>
#include <cassert>

namespace sluice::trace::wire {

void Buffer::Grow(size_t at_least) {
  const size_t capacity = std::max(at_least, 2 * capacity_);
  auto data = std::make_unique_for_overwrite<char[]>(capacity);
  if (size_ > 0) std::memcpy(data.get(), data_.get(), size_);
  data_ = std::move(data);
  capacity_ = capacity;
}

namespace {

// Appends a KeyValue{key, value: AnyValue} in `field`, its AnyValue's body `value_size` bytes
// long, written by `write_value` (at where it goes; returns past it). One growth of `out`.
template <typename WriteValue>
void AppendKeyValue(Buffer& out, int field, std::string_view key, size_t value_size,
                    WriteValue write_value) {
  const size_t body = FieldSize(key.size()) + FieldSize(value_size);
  char* const start = out.Extend(FieldSize(body));
  char* p = PutHeader(start, field, body);
  p = PutBytes(p, 1, key);
  [[maybe_unused]] const char* end = write_value(PutHeader(p, 2, value_size));
  assert(end == start + FieldSize(body));  // (the sizes above match what was written)
}

}  // namespace

void AppendAttribute(Buffer& out, int field, std::string_view key, std::string_view value) {
  AppendKeyValue(out, field, key, FieldSize(value.size()),
                 [value](char* p) { return PutBytes(p, 1, value); });
}

void AppendAttribute(Buffer& out, int field, std::string_view key, int64_t value) {
  const auto bits = static_cast<uint64_t>(value);  // int64: two's complement, as protobuf
  AppendKeyValue(out, field, key, 1 + VarintSize(bits),
                 [bits](char* p) { return PutVarint(PutTag(p, 3, 0), bits); });
}

void AppendAttribute(Buffer& out, int field, std::string_view key, bool value) {
  AppendKeyValue(out, field, key, 2, [value](char* p) {
    p = PutTag(p, 2, 0);
    *p++ = value ? 1 : 0;
    return p;
  });
}

void AppendAttribute(Buffer& out, int field, std::string_view key, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  AppendKeyValue(out, field, key, 9,
                 [bits](char* p) { return PutFixed<8>(PutTag(p, 4, 1), bits); });
}

void AppendAttribute(Buffer& out, int field, std::string_view key,
                     std::span<const std::string> values) {
  size_t array = 0;  // ArrayValue's body: an AnyValue{string_value} per item
  for (const std::string& item : values) array += FieldSize(FieldSize(item.size()));
  AppendKeyValue(out, field, key, FieldSize(array), [array, values](char* p) {
    p = PutHeader(p, 5, array);
    for (const std::string& item : values)
      p = PutBytes(PutHeader(p, 1, FieldSize(item.size())), 1, item);
    return p;
  });
}

namespace {

// Reads protobuf's wire format from the front of `in` (no field of a type AppendAttribute does
// not write is accepted).
struct Reader {
  std::string_view in;
  bool ok = true;

  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (in.empty()) break;
      const auto byte = static_cast<uint8_t>(in.front());
      in.remove_prefix(1);
      v |= uint64_t{byte & 0x7fu} << shift;
      if (byte < 0x80) return v;
    }
    ok = false;
    return 0;
  }
  // The next field's tag: its number and type.
  std::pair<uint64_t, int> Tag() {
    const uint64_t tag = Varint();
    return {tag >> 3, static_cast<int>(tag & 7)};
  }
  std::string_view Bytes() {
    const uint64_t n = Varint();
    if (!ok || n > in.size()) {
      ok = false;
      return {};
    }
    const std::string_view bytes = in.substr(0, n);
    in.remove_prefix(n);
    return bytes;
  }
  // A length-delimited field numbered `field`.
  std::string_view Field(uint64_t field) {
    const auto [number, type] = Tag();
    if (number != field || type != 2) ok = false;
    return ok ? Bytes() : std::string_view();
  }
};

std::optional<AttributeValue> ReadValue(std::string_view any) {
  Reader r{any};
  const auto [number, type] = r.Tag();
  AttributeValue value;
  if (number == 1 && type == 2) {
    value = std::string(r.Bytes());
  } else if (number == 2 && type == 0) {
    value = r.Varint() != 0;
  } else if (number == 3 && type == 0) {
    value = static_cast<int64_t>(r.Varint());
  } else if (number == 4 && type == 1 && r.in.size() >= 8) {
    uint64_t bits = 0;
    for (size_t i = 0; i < 8; ++i) bits |= uint64_t{static_cast<uint8_t>(r.in[i])} << (8 * i);
    r.in.remove_prefix(8);
    double d = 0;
    std::memcpy(&d, &bits, sizeof d);
    value = d;
  } else if (number == 5 && type == 2) {
    Reader array{r.Bytes()};
    std::vector<std::string> items;
    while (array.ok && !array.in.empty()) {
      Reader item{array.Field(1)};
      items.emplace_back(item.Field(1));
      if (!item.ok || !item.in.empty()) return std::nullopt;
    }
    if (!array.ok) return std::nullopt;
    value = std::move(items);
  } else {
    return std::nullopt;
  }
  if (!r.ok || !r.in.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::vector<Attribute>> ReadAttributes(std::string_view wire) {
  std::vector<Attribute> out;
  Reader r{wire};
  std::optional<uint64_t> field;  // the first one's; every one is in it
  while (r.ok && !r.in.empty()) {
    const auto [number, type] = r.Tag();
    if (type != 2 || (field && number != *field)) return std::nullopt;
    field = number;
    Reader kv{r.Bytes()};
    Attribute attribute{.key = std::string(kv.Field(1)), .value = {}};
    std::optional<AttributeValue> value = ReadValue(kv.Field(2));
    if (!r.ok || !kv.ok || !kv.in.empty() || !value) return std::nullopt;
    attribute.value = std::move(*value);
    out.push_back(std::move(attribute));
  }
  if (!r.ok) return std::nullopt;
  return out;
}

}  // namespace sluice::trace::wire
