#include "cli/rls_json_endpoint.h"

#include <functional>
#include <utility>

#include "rls/codec.h"

namespace sluice::cli {

http::JsonEndpoint RlsJsonEndpoint() {
  return [](http::JsonCall call, std::function<void(http::JsonAnswer)> done) {
    rls::AnswerJson(call.body, *call.engine, *call.config, *call.clock,
                    std::move(call.record_decision),
                    [done = std::move(done)](rls::JsonResult result) {
                      done(http::JsonAnswer{.status = result.status,
                                            .content_type = result.content_type,
                                            .body = std::move(result.body),
                                            .nosniff = result.nosniff});
                    });
  };
}

}  // namespace sluice::cli
