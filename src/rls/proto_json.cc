#include "rls/proto_json.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "util/json_string.h"

namespace sluice::rls {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

bool IsWellKnown(const google::protobuf::Descriptor& type) {
  return type.file()->package() == "google.protobuf";
}

bool AppendMessage(const Message& message, std::string* out);

// google.protobuf.Value, Struct (keys sorted, as protojson writes a map) and ListValue.
void AppendStructValue(const google::protobuf::Value& value, std::string* out);
void AppendStruct(const google::protobuf::Struct& s, std::string* out) {
  std::vector<const std::string*> keys;
  for (const auto& [key, value] : s.fields()) keys.push_back(&key);
  std::sort(keys.begin(), keys.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  out->push_back('{');
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out->push_back(',');
    util::AppendJsonString(out, *keys[i]);
    out->push_back(':');
    AppendStructValue(s.fields().at(*keys[i]), out);
  }
  out->push_back('}');
}
void AppendStructValue(const google::protobuf::Value& value, std::string* out) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kStructValue:
      return AppendStruct(value.struct_value(), out);
    case google::protobuf::Value::kListValue:
      out->push_back('[');
      for (int i = 0; i < value.list_value().values_size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendStructValue(value.list_value().values(i), out);
      }
      out->push_back(']');
      return;
    case google::protobuf::Value::kStringValue:
      return util::AppendJsonString(out, value.string_value());
    case google::protobuf::Value::kBoolValue:
      out->append(value.bool_value() ? "true" : "false");
      return;
    case google::protobuf::Value::kNumberValue: {
      const double n = value.number_value();
      if (!std::isfinite(n)) {  // not a JSON number: protojson refuses; a string is kinder
        return util::AppendJsonString(out, std::isnan(n) ? "NaN"
                                           : n > 0       ? "Infinity"
                                                         : "-Infinity");
      }
      char digits[32];
      const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;  // shortest
      out->append(digits, end);
      return;
    }
    default:
      out->append("null");
  }
}

// One value of `field` (element `index` of a repeated one, else -1).
bool AppendValue(const Message& message, const FieldDescriptor& field, int index,
                 std::string* out) {
  const Reflection& r = *message.GetReflection();
  const bool repeated = index >= 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      absl::StrAppend(
          out, repeated ? r.GetRepeatedInt32(message, &field, index) : r.GetInt32(message, &field));
      return true;
    case FieldDescriptor::CPPTYPE_UINT32:
      absl::StrAppend(out, repeated ? r.GetRepeatedUInt32(message, &field, index)
                                    : r.GetUInt32(message, &field));
      return true;
    case FieldDescriptor::CPPTYPE_INT64:  // 64-bit integers are strings in proto3 JSON
      absl::StrAppend(
          out, "\"",
          repeated ? r.GetRepeatedInt64(message, &field, index) : r.GetInt64(message, &field),
          "\"");
      return true;
    case FieldDescriptor::CPPTYPE_UINT64:
      absl::StrAppend(
          out, "\"",
          repeated ? r.GetRepeatedUInt64(message, &field, index) : r.GetUInt64(message, &field),
          "\"");
      return true;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->append(
          (repeated ? r.GetRepeatedBool(message, &field, index) : r.GetBool(message, &field))
              ? "true"
              : "false");
      return true;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number = repeated ? r.GetRepeatedEnumValue(message, &field, index)
                                  : r.GetEnumValue(message, &field);
      const auto* value = field.enum_type()->FindValueByNumber(number);
      if (value == nullptr) {
        absl::StrAppend(out, number);  // a number with no name is written as the number
      } else {
        util::AppendJsonString(out, value->name());
      }
      return true;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string scratch;
      const std::string& text = repeated
                                    ? r.GetRepeatedStringReference(message, &field, index, &scratch)
                                    : r.GetStringReference(message, &field, &scratch);
      if (field.type() == FieldDescriptor::TYPE_BYTES) {
        util::AppendJsonString(out, absl::Base64Escape(text));
      } else {
        util::AppendJsonString(out, text);
      }
      return true;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return AppendMessage(
          repeated ? r.GetRepeatedMessage(message, &field, index) : r.GetMessage(message, &field),
          out);
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return false;  // no such field in the messages sent; protobuf's rules for them are subtle
  }
  return false;
}

bool AppendMessage(const Message& message, std::string* out) {
  if (const auto* s = dynamic_cast<const google::protobuf::Struct*>(&message)) {
    AppendStruct(*s, out);
    return true;
  }
  if (IsWellKnown(*message.GetDescriptor())) {
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(message, &json).ok()) return false;
    out->append(json);
    return true;
  }
  std::vector<const FieldDescriptor*> fields;  // the fields that are set, by number
  message.GetReflection()->ListFields(message, &fields);
  std::sort(fields.begin(), fields.end(), [](const FieldDescriptor* a, const FieldDescriptor* b) {
    return a->index() < b->index();  // declaration order
  });
  out->push_back('{');
  bool first = true;
  for (const FieldDescriptor* field : fields) {
    if (field->is_map()) return false;  // none in the messages sent
    if (!first) out->push_back(',');
    first = false;
    util::AppendJsonString(out, field->json_name());
    out->push_back(':');
    if (!field->is_repeated()) {
      if (!AppendValue(message, *field, -1, out)) return false;
      continue;
    }
    out->push_back('[');
    const int size = message.GetReflection()->FieldSize(message, field);
    for (int i = 0; i < size; ++i) {
      if (i > 0) out->push_back(',');
      if (!AppendValue(message, *field, i, out)) return false;
    }
    out->push_back(']');
  }
  out->push_back('}');
  return true;
}

}  // namespace

bool AppendProtoJson(const Message& message, std::string* out) {
  return AppendMessage(message, out);
}

}  // namespace sluice::rls
