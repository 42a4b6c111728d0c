// The pieces of protobuf's wire format that sluice writes OTLP with by hand (varints, fixed-width
// numbers, length-delimited fields; field numbers from opentelemetry-proto, as in trace/otlp's
// proto/), and a span's attributes in it: Span::Set writes each attribute straight into its
// span as the KeyValue field it is sent as, so that the exporter copies a span's attributes
// whole instead of encoding them (a list of variants built, moved, sized and written field by
// field cost more than the rest of a traced decision).
//
//   Buffer wire;
//   AppendAttribute(wire, kSpanAttributes, "sluice.verdict", std::string_view("denied"));
//
// Every length is worked out before its bytes are written, so each byte is written once, in
// place; the exporter's tests parse the result with the generated messages.

#ifndef SLUICE_TRACE_WIRE_H_
#define SLUICE_TRACE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sluice::trace::wire {

// Span.attributes and Resource.attributes: the fields a KeyValue is written as.
inline constexpr int kSpanAttributes = 9;
inline constexpr int kResourceAttributes = 1;

constexpr size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}
// A length-delimited field of `length` bytes: its tag (one byte: every length-delimited field
// number written here is below 16), its length and the bytes.
constexpr size_t FieldSize(size_t length) { return 1 + VarintSize(length) + length; }

// Copies `n` bytes to `p`. Most of what is written is short (attribute names and values, span
// names): copied inline by two overlapping fixed-size copies, not by a call to memcpy.
inline void CopyBytes(char* p, const char* bytes, size_t n) {
  if (n >= 8 && n <= 16) {
    std::memcpy(p, bytes, 8);
    std::memcpy(p + n - 8, bytes + n - 8, 8);
  } else if (n >= 4 && n < 8) {
    std::memcpy(p, bytes, 4);
    std::memcpy(p + n - 4, bytes + n - 4, 4);
  } else if (n < 4) {
    for (size_t i = 0; i < n; ++i) p[i] = bytes[i];
  } else {
    std::memcpy(p, bytes, n);
  }
}

// Bytes written in place: a buffer that grows (never shrinks) and is emptied without giving its
// memory back. (A std::string would fill each new byte with zero before it is written.)
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer& other) { *this = other; }
  Buffer& operator=(const Buffer& other) {
    if (this != &other) {
      clear();
      if (!other.empty()) CopyBytes(Extend(other.size()), other.data_.get(), other.size());
    }
    return *this;
  }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    return *this;
  }

  // Where `n` more bytes go; they count as written (the caller writes every one).
  char* Extend(size_t n) {
    if (capacity_ - size_ < n) Grow(size_ + n);
    char* p = data_.get() + size_;
    size_ += n;
    return p;
  }
  void reserve(size_t capacity) {
    if (capacity > capacity_) Grow(capacity);
  }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_.get(), size_}; }
  operator std::string_view() const { return view(); }  // NOLINT(google-explicit-constructor)

 private:
  void Grow(size_t at_least);

  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// The Put functions write at `p`, which has room (the lengths were worked out first), and return
// where the next byte goes.
inline char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}
// A fixed64 (N 8) or fixed32 (N 4), little endian.
template <size_t N>
inline char* PutFixed(char* p, uint64_t v) {
  static_assert(N == 4 || N == 8);
  for (size_t i = 0; i < N; ++i, v >>= 8) *p++ = static_cast<char>(v & 0xff);
  return p;
}
// A tag of a field below 16.
inline char* PutTag(char* p, int field, int type) {
  *p++ = static_cast<char>((field << 3) | type);
  return p;
}
// A length-delimited field's head.
inline char* PutHeader(char* p, int field, size_t length) {
  return PutVarint(PutTag(p, field, 2), length);
}
inline char* PutBytes(char* p, int field, std::string_view bytes) {
  p = PutHeader(p, field, bytes.size());
  CopyBytes(p, bytes.data(), bytes.size());
  return p + bytes.size();
}

// Appends the attribute `key` = `value` to `out` as a KeyValue in field `field` (AnyValue's
// string_value, int_value, bool_value, double_value or array_value of string_values).
void AppendAttribute(Buffer& out, int field, std::string_view key, std::string_view value);
inline void AppendAttribute(Buffer& out, int field, std::string_view key, const char* value) {
  AppendAttribute(out, field, key, std::string_view(value));  // (not the bool's overload)
}
void AppendAttribute(Buffer& out, int field, std::string_view key, int64_t value);
void AppendAttribute(Buffer& out, int field, std::string_view key, bool value);
void AppendAttribute(Buffer& out, int field, std::string_view key, double value);
void AppendAttribute(Buffer& out, int field, std::string_view key,
                     std::span<const std::string> values);

// An attribute read back from its wire form (ReadAttributes).
using AttributeValue = std::variant<std::string, int64_t, bool, double, std::vector<std::string>>;
struct Attribute {
  std::string key;
  AttributeValue value;
};
// The attributes that AppendAttribute wrote into `wire` (in any one field), in order; nullopt
// when it is not such a sequence. For tests and diagnostics: what a span will send.
std::optional<std::vector<Attribute>> ReadAttributes(std::string_view wire);

}  // namespace sluice::trace::wire

#endif  // SLUICE_TRACE_WIRE_H_
