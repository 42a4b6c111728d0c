#include "xds/rate_limit_config.h"

#include <string>

#include "fmt/format.h"
#include "google/protobuf/struct.pb.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::xds {
namespace {

namespace v3 = ratelimit::config::ratelimit::v3;

// Scalars are written as the text a YAML file would hold; a string value of metadata is marked
// quoted, as a quoted YAML string is, so that the loader keeps it a string.

using rules::yaml::Document;
using rules::yaml::Node;

Node ValueOf(Document& doc, const google::protobuf::Value& value);

Node StructOf(Document& doc, const google::protobuf::Struct& s) {
  const Node out = doc.Map();
  for (const auto& [key, value] : s.fields()) doc.Set(out, key, ValueOf(doc, value));
  return out;
}

Node ValueOf(Document& doc, const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      return doc.Scalar(fmt::format("{}", value.number_value()));
    case google::protobuf::Value::kStringValue:
      return doc.Scalar(value.string_value(), /*quoted=*/true);
    case google::protobuf::Value::kBoolValue:
      return doc.Scalar(value.bool_value() ? "true" : "false");
    case google::protobuf::Value::kStructValue:
      return StructOf(doc, value.struct_value());
    case google::protobuf::Value::kListValue: {
      const Node out = doc.Sequence();
      for (const google::protobuf::Value& item : value.list_value().values()) {
        doc.Push(out, ValueOf(doc, item));
      }
      return out;
    }
    default:
      return doc.Null();
  }
}

Node PolicyOf(Document& doc, const v3::RateLimitPolicy& policy) {
  const Node out = doc.Map();
  // UNKNOWN is no unit: upstream's loader refuses it, unless the limit is unlimited, which must
  // have no unit.
  if (!policy.unlimited() || policy.unit() != v3::UNKNOWN) {
    doc.Set(out, "unit", doc.Scalar(v3::RateLimitUnit_Name(policy.unit())));
  }
  doc.Set(out, "requests_per_unit", doc.Scalar(std::to_string(policy.requests_per_unit())));
  if (policy.unlimited()) doc.Set(out, "unlimited", doc.Scalar("true"));
  if (!policy.name().empty()) doc.Set(out, "name", doc.Scalar(policy.name()));
  if (policy.replaces_size() > 0) {
    const Node replaces = doc.Set(out, "replaces", doc.Sequence());
    for (const v3::RateLimitReplace& r : policy.replaces()) {
      const Node entry = doc.Map();
      doc.Set(entry, "name", doc.Scalar(r.name()));
      doc.Push(replaces, entry);
    }
  }
  return out;
}

Node DescriptorsOf(Document& doc,
                   const google::protobuf::RepeatedPtrField<v3::RateLimitDescriptor>& list) {
  const Node out = doc.Sequence();
  for (const v3::RateLimitDescriptor& d : list) {
    const Node node = doc.Map();
    doc.Set(node, "key", doc.Scalar(d.key()));
    if (!d.value().empty()) doc.Set(node, "value", doc.Scalar(d.value()));
    if (d.has_rate_limit()) doc.Set(node, "rate_limit", PolicyOf(doc, d.rate_limit()));
    if (d.descriptors_size() > 0) doc.Set(node, "descriptors", DescriptorsOf(doc, d.descriptors()));
    if (d.shadow_mode()) doc.Set(node, "shadow_mode", doc.Scalar("true"));
    if (d.detailed_metric()) doc.Set(node, "detailed_metric", doc.Scalar("true"));
    if (d.quota_mode()) doc.Set(node, "quota_mode", doc.Scalar("true"));
    if (d.has_metadata()) doc.Set(node, "metadata", StructOf(doc, d.metadata()));
    doc.Push(out, node);
  }
  return out;
}

}  // namespace

rules::RemoteDomain ToRemoteDomain(const v3::RateLimitConfig& config, int index, uint64_t hash) {
  rules::RemoteDomain out;
  out.name = config.name().empty() ? fmt::format("xds:#{}", index) : "xds:" + config.name();
  out.hash = hash;
  auto document = std::make_shared<Document>();
  const Node root = document->Map();
  document->Set(root, "domain", document->Scalar(config.domain()));
  if (config.descriptors_size() > 0) {
    document->Set(root, "descriptors", DescriptorsOf(*document, config.descriptors()));
  }
  document->set_root(root);
  out.document = std::move(document);
  return out;
}

absl::StatusOr<std::shared_ptr<const rules::RemoteDomains>> RemoteDomainsOf(
    const envoy::service::discovery::v3::DiscoveryResponse& response) {
  auto domains = std::make_shared<rules::RemoteDomains>();
  domains->reserve(static_cast<size_t>(response.resources_size()));
  for (int i = 0; i < response.resources_size(); ++i) {
    const google::protobuf::Any& any = response.resources(i);
    if (any.type_url() != kRateLimitConfigType) {
      return absl::InvalidArgumentError(
          fmt::format("resource #{} is a {}, not a {}", i, any.type_url(), kRateLimitConfigType));
    }
    v3::RateLimitConfig config;
    if (!any.UnpackTo(&config)) {
      return absl::InvalidArgumentError(
          fmt::format("resource #{} does not decode as a RateLimitConfig", i));
    }
    const std::string& bytes = any.value();
    domains->push_back(ToRemoteDomain(config, i, XXH3_64bits(bytes.data(), bytes.size())));
  }
  return domains;
}

}  // namespace sluice::xds
