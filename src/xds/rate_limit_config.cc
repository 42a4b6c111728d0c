#include "xds/rate_limit_config.h"

#include <string>

#include "fmt/format.h"
#include "google/protobuf/struct.pb.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::xds {
namespace {

namespace v3 = ratelimit::config::ratelimit::v3;

// The tree is written in place, each node made by its parent's operator[] inside the one document:
// yaml-cpp otherwise gives every node made on its own a memory of its own, merged into its
// parent's when it is attached, which made building a 10,000-descriptor rule set cost twice its
// parse. Scalars are written as strings (yaml-cpp writes a string straight in; other types go
// through a node of their own); a string value of metadata is tagged "!" as a quoted YAML string
// is, so that the loader keeps it a string.

void FillValue(YAML::Node out, const google::protobuf::Value& value);

void FillStruct(YAML::Node out, const google::protobuf::Struct& s) {
  if (s.fields().empty()) {
    out = YAML::Node(YAML::NodeType::Map);
    return;
  }
  for (const auto& [key, value] : s.fields()) FillValue(out[key], value);
}

void FillValue(YAML::Node out, const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      out = fmt::format("{}", value.number_value());
      return;
    case google::protobuf::Value::kStringValue:
      out = value.string_value();
      out.SetTag("!");
      return;
    case google::protobuf::Value::kBoolValue:
      out = value.bool_value() ? "true" : "false";
      return;
    case google::protobuf::Value::kStructValue:
      FillStruct(out, value.struct_value());
      return;
    case google::protobuf::Value::kListValue: {
      const auto& items = value.list_value().values();
      if (items.empty()) out = YAML::Node(YAML::NodeType::Sequence);
      for (size_t i = 0; i < static_cast<size_t>(items.size()); ++i) {
        FillValue(out[i], items[static_cast<int>(i)]);
      }
      return;
    }
    default:
      out = YAML::Node(YAML::NodeType::Null);
  }
}

void FillPolicy(YAML::Node out, const v3::RateLimitPolicy& policy) {
  // UNKNOWN is no unit: upstream's loader refuses it, unless the limit is unlimited, which must
  // have no unit.
  if (!policy.unlimited() || policy.unit() != v3::UNKNOWN) {
    out["unit"] = v3::RateLimitUnit_Name(policy.unit());
  }
  out["requests_per_unit"] = std::to_string(policy.requests_per_unit());
  if (policy.unlimited()) out["unlimited"] = "true";
  if (!policy.name().empty()) out["name"] = policy.name();
  YAML::Node replaces;
  for (size_t i = 0; i < static_cast<size_t>(policy.replaces_size()); ++i) {
    if (i == 0) replaces = out["replaces"];
    replaces[i]["name"] = policy.replaces(static_cast<int>(i)).name();
  }
}

void FillDescriptors(YAML::Node out,
                     const google::protobuf::RepeatedPtrField<v3::RateLimitDescriptor>& list) {
  for (size_t i = 0; i < static_cast<size_t>(list.size()); ++i) {
    const v3::RateLimitDescriptor& d = list[static_cast<int>(i)];
    YAML::Node node = out[i];
    node["key"] = d.key();
    if (!d.value().empty()) node["value"] = d.value();
    if (d.has_rate_limit()) FillPolicy(node["rate_limit"], d.rate_limit());
    if (d.descriptors_size() > 0) FillDescriptors(node["descriptors"], d.descriptors());
    if (d.shadow_mode()) node["shadow_mode"] = "true";
    if (d.detailed_metric()) node["detailed_metric"] = "true";
    if (d.quota_mode()) node["quota_mode"] = "true";
    if (d.has_metadata()) FillStruct(node["metadata"], d.metadata());
  }
}

}  // namespace

rules::RemoteDomain ToRemoteDomain(const v3::RateLimitConfig& config, int index, uint64_t hash) {
  rules::RemoteDomain out;
  out.name = config.name().empty() ? fmt::format("xds:#{}", index) : "xds:" + config.name();
  out.hash = hash;
  out.doc = YAML::Node(YAML::NodeType::Map);
  out.doc["domain"] = config.domain();
  if (config.descriptors_size() > 0) FillDescriptors(out.doc["descriptors"], config.descriptors());
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
