// util::Log (log.h).

#include "util/log.h"

#include <memory>

#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace sluice::util {
namespace {

std::shared_ptr<spdlog::logger> MakeLogger() {
  if (auto registered = spdlog::get("sluice")) return registered;
  auto logger = std::make_shared<spdlog::logger>(
      "sluice", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  try {
    spdlog::initialize_logger(logger);  // takes the registry's level and pattern, registers it
  } catch (const spdlog::spdlog_ex&) {
    // Registered by another thread in between: use that one.
    if (auto registered = spdlog::get("sluice")) return registered;
  }
  // spdlog's default pattern without the logger's name: every line here is sluice's.
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  return logger;
}

}  // namespace

spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> logger = MakeLogger();
  return *logger;
}

}  // namespace sluice::util
