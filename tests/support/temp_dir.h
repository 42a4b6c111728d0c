// A temporary directory for one test's files: a fresh directory under the system's temp dir
// (mkdtemp), removed with everything in it when the TempDir is destroyed. A failure to create it
// fails the running test (ADD_FAILURE). The TempDir owns the directory; it is not copyable. Its
// const methods may be called from any thread, but writes to one file are not serialized.

#ifndef SLUICE_TESTS_SUPPORT_TEMP_DIR_H_
#define SLUICE_TESTS_SUPPORT_TEMP_DIR_H_

#include <filesystem>
#include <string>
#include <string_view>

namespace sluice::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory (empty if it could not be created).
  const std::filesystem::path& path() const { return path_; }

  // path() / `relative`, as a string ("" gives the directory with a trailing slash).
  std::string Path(std::string_view relative) const;

  // Writes `text` to `relative` (replacing what is there), creating its directories; the file's
  // path ("" and nothing written when there is no directory).
  std::string Write(std::string_view relative, std::string_view text) const;

 private:
  std::filesystem::path path_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_TEMP_DIR_H_
