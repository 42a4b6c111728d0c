// sluice's logger: every log line of sluice's code goes through util::Log(), a spdlog logger
// named "sluice" that writes to standard error, never to standard output (which belongs to the
// program: a library user's output, or serve's start-up lines).
//
// Thread safety: Log() may be called from any thread; the logger is made once, on first use,
// and registered with spdlog, so spdlog::set_level and spdlog::get("sluice") reach it. A program
// that registers its own logger named "sluice" first gets its lines instead.

#ifndef SLUICE_UTIL_LOG_H_
#define SLUICE_UTIL_LOG_H_

#include "spdlog/logger.h"

namespace sluice::util {

spdlog::logger& Log();

}  // namespace sluice::util

#endif  // SLUICE_UTIL_LOG_H_
