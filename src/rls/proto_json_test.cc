// AppendProtoJson: fields in .proto declaration order (issue 19 #6), checked against the
// messages' descriptors rather than hand-written strings, and protojson's forms of each value.

#include "rls/proto_json.h"

#include <google/protobuf/descriptor.h>

#include <string>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::rls {
namespace {

using ::envoy::service::ratelimit::v3::RateLimitResponse;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The keys of the outermost object of `json`, in order (strings and nesting skipped over).
std::vector<std::string> TopLevelKeys(const std::string& json) {
  std::vector<std::string> keys;
  int depth = 0;
  bool expecting_key = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '"') {
      std::string text;
      for (++i; i < json.size() && json[i] != '"'; ++i) {
        if (json[i] == '\\') ++i;
        text.push_back(json[i]);
      }
      if (depth == 1 && expecting_key) keys.push_back(text);
      expecting_key = false;
    } else if (c == '{' || c == '[') {
      ++depth;
      expecting_key = c == '{' && depth == 1;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expecting_key = true;
    }
  }
  return keys;
}

// Sets every field of `message` (one element of each repeated field, the first member of each
// oneof) to a value that is not its default; messages of its own package recursively.
void Populate(Message* message) {
  const auto* type = message->GetDescriptor();
  const auto* r = message->GetReflection();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    if (f->containing_oneof() != nullptr && f->index_in_oneof() != 0) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* sub = f->is_repeated() ? r->AddMessage(message, f) : r->MutableMessage(message, f);
      if (sub->GetDescriptor()->file()->package() != "google.protobuf") Populate(sub);
      continue;
    }
    ASSERT_FALSE(f->is_repeated()) << f->full_name() << ": a repeated scalar; add it here";
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT32:
        r->SetUInt32(message, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        r->SetInt32(message, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(message, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(message, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(message, f, true);
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        r->SetEnumValue(message, f, 1);
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        r->SetString(message, f, "v");
        break;
      default:
        FAIL() << f->full_name() << ": a field type to add here";
    }
  }
}

// Every message type reachable from `message`'s fields, outside google.protobuf.
void CheckOrder(const Message& message) {
  SCOPED_TRACE(message.GetDescriptor()->full_name());
  std::string json;
  ASSERT_TRUE(AppendProtoJson(message, &json));
  std::vector<std::string> declared;
  const auto* type = message.GetDescriptor();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    if (f->containing_oneof() != nullptr && f->index_in_oneof() != 0) continue;
    declared.push_back(f->json_name());
  }
  EXPECT_EQ(TopLevelKeys(json), declared) << json;
  const auto* r = message.GetReflection();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->message_type()->file()->package() == "google.protobuf") continue;
    if (f->is_repeated() ? r->FieldSize(message, f) == 0 : !r->HasField(message, f)) continue;
    CheckOrder(f->is_repeated() ? r->GetRepeatedMessage(message, f, 0) : r->GetMessage(message, f));
  }
}

TEST(ProtoJsonTest, EveryMessageOfTheResponseHasItsFieldsInDeclarationOrder) {
  RateLimitResponse response;
  Populate(&response);
  CheckOrder(response);
  // The field that made the difference: RateLimit declares `name` (3) first.
  const auto* rate_limit = RateLimitResponse::RateLimit::descriptor();
  ASSERT_EQ(rate_limit->field(0)->name(), "name");
  EXPECT_GT(rate_limit->field(0)->number(), rate_limit->field(1)->number());
}

TEST(ProtoJsonTest, ANamedLimitReadsNameFirstAsUpstreamWritesIt) {
  RateLimitResponse response;
  response.set_overall_code(RateLimitResponse::OK);
  auto* status = response.add_statuses();
  status->set_code(RateLimitResponse::OK);
  status->mutable_current_limit()->set_name("per-user");
  status->mutable_current_limit()->set_requests_per_unit(2);
  status->mutable_current_limit()->set_unit(RateLimitResponse::RateLimit::MINUTE);
  status->set_limit_remaining(1);
  status->mutable_duration_until_reset()->set_seconds(40);
  std::string json;
  ASSERT_TRUE(AppendProtoJson(response, &json));
  EXPECT_EQ(json, R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":)"
                  R"({"name":"per-user","requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,)"
                  R"("durationUntilReset":"40s"}]})");
}

TEST(ProtoJsonTest, ValuesTakeProtojsonsForms) {
  RateLimitResponse response;  // every field at its default: nothing written
  std::string json;
  ASSERT_TRUE(AppendProtoJson(response, &json));
  EXPECT_EQ(json, "{}");
  auto* header = response.add_response_headers_to_add();
  header->set_key("x-a\"b\\c\n");
  header->set_value(std::string("\x01", 1));
  response.set_raw_body("hi!");  // bytes: base64
  (*response.mutable_dynamic_metadata()->mutable_fields())["k"].set_string_value("v");
  json.clear();
  ASSERT_TRUE(AppendProtoJson(response, &json));
  EXPECT_EQ(json, R"({"responseHeadersToAdd":[{"key":"x-a\"b\\c\n","value":"\u0001"}],)"
                  R"("rawBody":"aGkh","dynamicMetadata":{"k":"v"}})");
}

}  // namespace
}  // namespace sluice::rls
