// How a request's descriptors meet a domain's rules: the text `sluice explain` prints and the
// admin API's GET /v1/explain answers (docs/cli.md, "explain"). Pure: reads the config only.

#ifndef SLUICE_ENGINE_EXPLAIN_H_
#define SLUICE_ENGINE_EXPLAIN_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "rules/config.h"
#include "rules/overrides.h"

namespace sluice::engine {

// `descriptors` as the admin API's `descriptors=` (k=v,k=v;k=v). NotFound for an unknown domain,
// InvalidArgument for descriptors that do not parse; the message says which. With `overrides`,
// a runtime override in force at `now_us` is the result of the descriptors it applies to.
absl::StatusOr<std::string> Explain(const rules::Config& config, std::string_view domain,
                                    std::string_view descriptors,
                                    const rules::OverrideSet* overrides = nullptr,
                                    int64_t now_us = 0);

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_EXPLAIN_H_
