#include "tests/support/temp_dir.h"

#include <stdlib.h>

#include <fstream>
#include <system_error>

#include "gtest/gtest.h"

namespace sluice::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string templ = (fs::temp_directory_path() / "sluice_test_XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << templ;
    return;
  }
  path_ = templ;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::Path(std::string_view relative) const { return (path_ / relative).string(); }

std::string TempDir::Write(std::string_view relative, std::string_view text) const {
  if (path_.empty()) return "";  // (the constructor failed the test)
  const fs::path p = path_ / relative;
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  return p.string();
}

}  // namespace sluice::testing
