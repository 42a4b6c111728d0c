#include "cli/rules_commands.h"

#include <filesystem>
#include <memory>

#include "cli/replay.h"
#include "cli/serve_tls.h"
#include "cli/serve_tracing.h"
#include "engine/descriptor_text.h"
#include "engine/explain.h"
#include "fmt/format.h"
#include "rules/admin_access.h"
#include "rules/loader.h"
#include "rules/matcher.h"
#include "rules/override_book.h"
#include "sluice/clock.h"
#include "stack/redis_tls.h"
#include "stack/stack.h"

namespace sluice::cli {

int RunCheckConfig(const std::vector<std::string>& paths, std::ostream& out) {
  const rules::LoadResult result = rules::LoadConfig(paths);
  if (!result.errors.empty()) {
    for (const auto& e : result.errors) out << e.ToString() << "\n";
    return 1;
  }
  // What serve refuses at start beyond the files' own checks: the admin API's access, and TLS
  // files for Redis or the listeners that cannot be used.
  std::vector<rules::ConfigError> refused = rules::CheckAdminAccess(result.config->settings);
  for (rules::ConfigError& e : stack::CheckRedisTls(result.config->settings)) {
    refused.push_back(std::move(e));
  }
  for (rules::ConfigError& e : CheckListenerTls(result.config->settings)) {
    refused.push_back(std::move(e));
  }
  const rules::TracingSettings& tracing = result.config->settings.tracing;
  if (absl::Status s = CheckTracing(tracing); !s.ok()) {
    refused.push_back({tracing.endpoint_at, fmt::format("tracing: {}", std::string(s.message()))});
  }
  if (!refused.empty()) {
    for (const auto& e : refused) out << e.ToString() << "\n";
    return 1;
  }
  out << fmt::format("ok: {} domains, {} limits\n", result.config->domains.size(),
                     result.config->limit_count);
  return 0;
}

int RunRulesReplay(const rules::Config& config, const std::string& domain, std::istream& in,
                   std::ostream& out, std::ostream& err) {
  if (config.FindDomain(domain) == nullptr) {
    err << "replay: unknown domain '" << domain << "'\n";
    return 2;
  }
  ManualClock clock;
  const std::unique_ptr<stack::Stack> backends = stack::Stack::Memory(config.settings, &clock);
  engine::Engine engine(&backends->backend());
  engine::Request request;
  request.domain = domain;
  return ReplayTrace(in, out, err, [&](const TraceRequest& line, std::string* error) {
    auto descriptors = engine::ParseDescriptorList(line.key, error);
    if (!descriptors) return std::optional<Decision>();
    request.descriptors = std::move(*descriptors);
    request.hits_addend = line.cost;
    const engine::Response response = engine.Check(config, request, line.t_ms * 1000);
    Decision d;
    d.allowed = response.allowed;
    d.remaining = response.remaining;
    if (const engine::AppliedLimit* headline = response.Headline()) {
      d.retry_after_us = response.allowed ? 0 : headline->decision.retry_after_us;
      d.reset_after_us = headline->decision.reset_after_us;
    }
    for (const auto& desc : response.descriptors) {
      for (const auto& limit : desc.limits)
        d.delay_us = std::max(d.delay_us, limit.decision.delay_us);
    }
    return std::optional<Decision>(d);
  });
}

int RunExplain(const rules::Config& config, const std::string& domain_name,
               std::string_view descriptors, std::ostream& out, std::ostream& err) {
  // The runtime overrides kept in the settings' state directory, if any (those kept on Redis
  // are the admin API's: GET /v1/explain).
  const int64_t now_us = SystemClock::Get()->NowMicros();
  std::unique_ptr<rules::FileOverrideBook> kept;
  if (const std::string path = config.settings.state_dir + "/overrides.jsonl";
      !config.settings.state_dir.empty() && std::filesystem::exists(path)) {
    auto book = rules::FileOverrideBook::Open(path, config, [now_us] { return now_us; });
    if (!book.ok()) {
      err << "explain: " << book.status().message() << "\n";
      return 2;
    }
    kept = std::move(*book);
  }
  const std::shared_ptr<const rules::OverrideSet> overrides = kept ? kept->Current() : nullptr;
  absl::StatusOr<std::string> text =
      engine::Explain(config, domain_name, descriptors, overrides.get(), now_us);
  if (!text.ok()) {
    err << "explain: " << text.status().message() << "\n";
    return 2;
  }
  out << *text;
  return 0;
}

}  // namespace sluice::cli
