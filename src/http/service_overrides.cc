// The admin API's runtime overrides (docs/http-api.md, "Overrides"):
//   GET    /v1/overrides[?domain=D]            {"overrides": [...]}, those in force
//   PUT    /v1/overrides    (token)            body: one override's JSON (rules/overrides.h)
//   DELETE /v1/overrides?domain=D&entries=k=v,k=v   (token)
// Every change is logged with the name of the admin token it was made with.

#include <utility>

#include "engine/descriptor_text.h"
#include "fmt/format.h"
#include "http/check_json.h"
#include "http/service.h"
#include "http/service_answers.h"
#include "util/log.h"

namespace sluice::http {
namespace {

std::string ListOverrides(const rules::OverrideSet* set, const std::optional<std::string>& domain,
                          int64_t now_us) {
  std::string out = R"({"overrides":[)";
  bool first = true;
  if (set != nullptr) {
    for (const rules::Override& o : set->all()) {
      if (o.Expired(now_us) || (domain && o.domain != *domain)) continue;
      if (!first) out += ',';
      first = false;
      out += rules::RenderOverride(o);
    }
  }
  out += "]}";
  return out;
}

// "until 2026-12-14T00:00:00Z" or "with no end", for the log.
std::string UntilText(const rules::Override& o) {
  return o.until_us == 0 ? "with no end" : "until " + rules::FormatUnixTime(o.until_us);
}

}  // namespace

void Service::Overrides(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  const auto method = request.method();
  const int64_t now_us = clock_->NowMicros();
  if (method == beast_http::verb::get) {
    const std::shared_ptr<const rules::OverrideSet> set = override_book_->Current();
    return SetJson(response, beast_http::status::ok,
                   ListOverrides(set.get(), QueryParam(request, "domain"), now_us));
  }
  if (method != beast_http::verb::put && method != beast_http::verb::delete_) {
    return MethodNotAllowed(response, "GET, PUT, DELETE");
  }
  std::string who;
  if (!Authorized(request, response, &who)) return;
  if (who.empty()) who = "anonymous";  // no token configured (a loopback admin port)
  const std::shared_ptr<const rules::Config> config = config_->Current();

  if (method == beast_http::verb::put) {
    absl::StatusOr<rules::Override> o =
        rules::ParseOverride(request.body(), *config, now_us, /*stored=*/false);
    if (!o.ok()) {
      return SetJson(response, beast_http::status::bad_request,
                     RenderError(std::string(o.status().message())));
    }
    o->set_by = who;
    o->set_at_us = now_us;
    std::string rendered = rules::RenderOverride(*o);
    std::string what =
        fmt::format("domain {} {} {}: {}", o->domain, rules::OverrideEntriesText(o->entries),
                    UntilText(*o), o->limits_json);
    return AnswerMaybeLater(response, deferral, [&](Send send) {
      override_book_->Put(std::move(*o), [send, who, rendered = std::move(rendered),
                                          what = std::move(what)](absl::Status kept) {
        HttpResponse answer;
        if (!kept.ok()) {
          util::Log().warn("override by {} not kept: {}: {}", who, what,
                           std::string(kept.message()));
          SetJson(answer, beast_http::status::service_unavailable,
                  RenderError(fmt::format("the override could not be kept: {}",
                                          std::string(kept.message()))));
        } else {
          util::Log().info("override set by {}: {}", who, what);
          SetJson(answer, beast_http::status::ok, fmt::format(R"({{"override":{}}})", rendered));
        }
        send(std::move(answer));
      });
    });
  }

  const auto domain = QueryParam(request, "domain");
  const auto text = QueryParam(request, "entries");
  std::string error;
  std::optional<engine::Descriptors> parsed;
  if (domain && !domain->empty() && text) parsed = engine::ParseDescriptorList(*text, &error);
  if (!parsed || parsed->size() != 1) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(error.empty() ? "give ?domain=D&entries=k=v[,k=v...]" : error));
  }
  std::vector<rules::Entry> entries(parsed->front().entries.begin(), parsed->front().entries.end());
  rules::SortEntries(entries);
  std::string named = fmt::format("domain {} {}", *domain, rules::OverrideEntriesText(entries));
  AnswerMaybeLater(response, deferral, [&](Send send) {
    override_book_->Remove(
        *domain, std::move(entries),
        [send, who, named = std::move(named)](absl::StatusOr<bool> removed) {
          HttpResponse answer;
          if (!removed.ok()) {
            SetJson(answer, beast_http::status::service_unavailable,
                    RenderError(fmt::format("the override could not be removed: {}",
                                            std::string(removed.status().message()))));
          } else if (!*removed) {
            SetJson(answer, beast_http::status::not_found,
                    RenderError(fmt::format("no override for {}", named)));
          } else {
            util::Log().info("override removed by {}: {}", who, named);
            SetJson(answer, beast_http::status::ok, R"({"removed":true})");
          }
          send(std::move(answer));
        });
  });
}

}  // namespace sluice::http
