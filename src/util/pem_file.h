// ReadPemFile: a TLS file's bytes (a certificate chain, a key, CAs), or an error that names the
// file, what it was for and why it cannot be used: not there or unreadable, a directory, or over
// 1 MiB (no PEM file is that large). For the listeners' TLS and the xDS client's.

#ifndef SLUICE_UTIL_PEM_FILE_H_
#define SLUICE_UTIL_PEM_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::util {

// `what` names the file's use in the error ("TLS certificate /etc/tls.crt: is a directory ...").
absl::StatusOr<std::string> ReadPemFile(const std::string& path, std::string_view what);

}  // namespace sluice::util

#endif  // SLUICE_UTIL_PEM_FILE_H_
