#include "xds/rate_limit_config.h"

#include <string>

#include "fmt/format.h"
#include "google/protobuf/struct.pb.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::xds {
namespace {

namespace v3 = ratelimit::config::ratelimit::v3;

YAML::Node FromValue(const google::protobuf::Value& value);

YAML::Node FromStruct(const google::protobuf::Struct& s) {
  YAML::Node map(YAML::NodeType::Map);
  for (const auto& [key, value] : s.fields()) map[key] = FromValue(value);
  return map;
}

YAML::Node FromValue(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      return YAML::Node(value.number_value());
    case google::protobuf::Value::kStringValue:
      return YAML::Node(value.string_value());
    case google::protobuf::Value::kBoolValue:
      return YAML::Node(value.bool_value());
    case google::protobuf::Value::kStructValue:
      return FromStruct(value.struct_value());
    case google::protobuf::Value::kListValue: {
      YAML::Node list(YAML::NodeType::Sequence);
      for (const auto& item : value.list_value().values()) list.push_back(FromValue(item));
      return list;
    }
    default:
      return YAML::Node(YAML::NodeType::Null);
  }
}

YAML::Node FromPolicy(const v3::RateLimitPolicy& policy) {
  YAML::Node node(YAML::NodeType::Map);
  // UNKNOWN is no unit: upstream's loader refuses it, unless the limit is unlimited, which must
  // have no unit.
  if (!policy.unlimited() || policy.unit() != v3::UNKNOWN) {
    node["unit"] = v3::RateLimitUnit_Name(policy.unit());
  }
  node["requests_per_unit"] = policy.requests_per_unit();
  if (policy.unlimited()) node["unlimited"] = true;
  if (!policy.name().empty()) node["name"] = policy.name();
  if (policy.replaces_size() > 0) {
    YAML::Node replaces(YAML::NodeType::Sequence);
    for (const auto& r : policy.replaces()) {
      YAML::Node entry(YAML::NodeType::Map);
      entry["name"] = r.name();
      replaces.push_back(entry);
    }
    node["replaces"] = replaces;
  }
  return node;
}

YAML::Node FromDescriptors(
    const google::protobuf::RepeatedPtrField<v3::RateLimitDescriptor>& descriptors) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (const v3::RateLimitDescriptor& d : descriptors) {
    YAML::Node node(YAML::NodeType::Map);
    node["key"] = d.key();
    if (!d.value().empty()) node["value"] = d.value();
    if (d.has_rate_limit()) node["rate_limit"] = FromPolicy(d.rate_limit());
    if (d.descriptors_size() > 0) node["descriptors"] = FromDescriptors(d.descriptors());
    if (d.shadow_mode()) node["shadow_mode"] = true;
    if (d.detailed_metric()) node["detailed_metric"] = true;
    if (d.quota_mode()) node["quota_mode"] = true;
    if (d.has_metadata()) node["metadata"] = FromStruct(d.metadata());
    list.push_back(node);
  }
  return list;
}

}  // namespace

rules::RemoteDomain ToRemoteDomain(const v3::RateLimitConfig& config, int index, uint64_t hash) {
  rules::RemoteDomain out;
  out.name = config.name().empty() ? fmt::format("xds:#{}", index) : "xds:" + config.name();
  out.hash = hash;
  out.doc = YAML::Node(YAML::NodeType::Map);
  out.doc["domain"] = config.domain();
  out.doc["descriptors"] = FromDescriptors(config.descriptors());
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
