#include "util/pem_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace sluice::util {
namespace {

// A PEM file larger than this is not a certificate chain or a key.
constexpr off_t kMaxPemBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        fmt::format("TLS {} {}: cannot read it: {}", what, path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        fmt::format("TLS {} {}: is a directory, not a PEM file", what, path));
  }
  if (st.st_size > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        fmt::format("TLS {} {}: larger than 1 MiB, not a PEM file", what, path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        fmt::format("TLS {} {}: cannot read it: {}", what, path, std::strerror(errno)));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return std::move(bytes).str();
}

}  // namespace sluice::util
