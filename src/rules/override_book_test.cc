// FileOverrideBook (override_book.h): the overrides of one process kept in a JSON Lines file
// (or in memory only): what is put comes back when the file is opened again, a removal or a
// replacement is kept, expired ones are dropped at the next write, a hand-broken line is skipped,
// and a write that fails leaves the set in force as it was.

#include "rules/override_book.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader_testing.h"
#include "rules/overrides.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr std::string_view kBookRulesYaml = R"yaml(domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
)yaml";

constexpr int64_t kBookT0Us = int64_t{1700000000} * test::kSecondUs;  // 2023-11-14T22:13:20Z

class OverrideBookTest : public ::testing::Test {
 protected:
  std::unique_ptr<FileOverrideBook> OpenBook(const std::string& path) {
    absl::StatusOr<std::unique_ptr<FileOverrideBook>> book =
        FileOverrideBook::Open(path, *config_, [this] { return now_us_; });
    EXPECT_TRUE(book.ok()) << book.status();
    return book.ok() ? std::move(*book) : nullptr;
  }

  // api_key=`value` at `requests` a minute, with `extra` fields (", ..."), set by `who` now.
  Override Make(std::string_view value, int requests, std::string_view extra = "",
                std::string who = "alice") {
    const std::string text = BookJson(value, requests, extra);
    absl::StatusOr<Override> o = ParseOverride(text, *config_, now_us_, /*stored=*/false);
    EXPECT_TRUE(o.ok()) << o.status() << "\n" << text;
    if (!o.ok()) return Override{};
    o->set_by = std::move(who);
    o->set_at_us = now_us_;
    return std::move(*o);
  }

  static std::string BookJson(std::string_view value, int requests, std::string_view extra) {
    std::string text = R"({"domain": "api", "entries": [{"key": "api_key", "value": ")";
    text += value;
    text +=
        R"("}], "limits": [{"requests": )" + std::to_string(requests) + R"(, "unit": "minute"}])";
    text += extra;
    return text + "}";
  }

  static absl::Status PutNow(OverrideBook& book, Override o) {
    absl::Status got = absl::InternalError("done never ran");
    int calls = 0;
    book.Put(std::move(o), [&](absl::Status s) {
      got = std::move(s);
      ++calls;
    });
    EXPECT_EQ(calls, 1);
    return got;
  }

  static absl::StatusOr<bool> RemoveNow(OverrideBook& book, std::string_view value) {
    absl::StatusOr<bool> got = absl::InternalError("done never ran");
    int calls = 0;
    book.Remove("api", {{"api_key", std::string(value)}}, [&](absl::StatusOr<bool> removed) {
      got = std::move(removed);
      ++calls;
    });
    EXPECT_EQ(calls, 1);
    return got;
  }

  // The override in force for api_key=`value` now, or null.
  const Override* For(const OverrideBook& book, std::string_view value) {
    held_ = book.Current();
    if (held_ == nullptr) return nullptr;
    const std::vector<Entry> entries = {{"api_key", std::string(value)}};
    return held_->Find("api", entries, now_us_);
  }

  static size_t Count(const OverrideBook& book) {
    const std::shared_ptr<const OverrideSet> set = book.Current();
    return set == nullptr ? 0 : set->all().size();
  }

  static std::vector<std::string> FileLines(const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  int64_t now_us_ = kBookT0Us;
  std::shared_ptr<const Config> config_ = test::MustLoad(kBookRulesYaml);
  sluice::testing::TempDir dir_;
  std::shared_ptr<const OverrideSet> held_;
};

TEST_F(OverrideBookTest, WhatIsPutComesBackOnReopen) {
  const std::string path = dir_.Path("overrides.jsonl");
  {
    std::unique_ptr<FileOverrideBook> book = OpenBook(path);
    ASSERT_NE(book, nullptr);
    EXPECT_EQ(book->Current(), nullptr);  // no file yet: none
    EXPECT_THAT(book->where(), HasSubstr(path));
    ASSERT_TRUE(PutNow(*book, Make("acme", 5, R"(, "for": "7d", "reason": "launch")")).ok());
    now_us_ += 1000;
    ASSERT_TRUE(PutNow(*book, Make("bob", 7, "", "carol")).ok());
    EXPECT_EQ(Count(*book), 2u);
  }
  EXPECT_THAT(FileLines(path), SizeIs(2));
  now_us_ += 60 * test::kSecondUs;
  std::unique_ptr<FileOverrideBook> again = OpenBook(path);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Count(*again), 2u);
  const Override* acme = For(*again, "acme");
  ASSERT_NE(acme, nullptr);
  ASSERT_EQ(acme->limits.size(), 1u);
  EXPECT_EQ(acme->limits[0].limit.requests, 5u);
  EXPECT_EQ(acme->limits[0].limit.window_us, 60 * test::kSecondUs);
  EXPECT_EQ(acme->until_us, kBookT0Us + 7 * 86400 * test::kSecondUs);
  EXPECT_EQ(acme->reason, "launch");
  EXPECT_EQ(acme->set_by, "alice");
  EXPECT_EQ(acme->set_at_us, kBookT0Us);
  const Override* bob = For(*again, "bob");
  ASSERT_NE(bob, nullptr);
  ASSERT_EQ(bob->limits.size(), 1u);
  EXPECT_EQ(bob->limits[0].limit.requests, 7u);
  EXPECT_EQ(bob->until_us, 0);
  EXPECT_EQ(bob->set_by, "carol");
  EXPECT_EQ(bob->set_at_us, kBookT0Us + 1000);
}

TEST_F(OverrideBookTest, RemovalIsKept) {
  const std::string path = dir_.Path("overrides.jsonl");
  std::unique_ptr<FileOverrideBook> book = OpenBook(path);
  ASSERT_NE(book, nullptr);
  ASSERT_TRUE(PutNow(*book, Make("acme", 5)).ok());
  ASSERT_TRUE(PutNow(*book, Make("bob", 7)).ok());
  const absl::StatusOr<bool> removed = RemoveNow(*book, "acme");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(*removed);
  EXPECT_EQ(For(*book, "acme"), nullptr);
  EXPECT_NE(For(*book, "bob"), nullptr);
  std::unique_ptr<FileOverrideBook> again = OpenBook(path);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Count(*again), 1u);
  EXPECT_EQ(For(*again, "acme"), nullptr);
  EXPECT_NE(For(*again, "bob"), nullptr);
  // The last one removed: none in force.
  ASSERT_TRUE(RemoveNow(*again, "bob").value_or(false));
  EXPECT_EQ(again->Current(), nullptr);
  EXPECT_THAT(FileLines(path), SizeIs(0));
}

TEST_F(OverrideBookTest, RemovingAnUnknownOneSaysSo) {
  const std::string path = dir_.Path("overrides.jsonl");
  std::unique_ptr<FileOverrideBook> book = OpenBook(path);
  ASSERT_NE(book, nullptr);
  const absl::StatusOr<bool> none = RemoveNow(*book, "acme");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(*none);
  ASSERT_TRUE(PutNow(*book, Make("acme", 5)).ok());
  const absl::StatusOr<bool> other = RemoveNow(*book, "bob");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(*other);
  // Another domain with the same entries is another override.
  absl::StatusOr<bool> web = absl::InternalError("done never ran");
  book->Remove("web", {{"api_key", "acme"}}, [&](absl::StatusOr<bool> r) { web = std::move(r); });
  ASSERT_TRUE(web.ok()) << web.status();
  EXPECT_FALSE(*web);
  EXPECT_EQ(Count(*book), 1u);
}

TEST_F(OverrideBookTest, PutWithTheSameEntriesReplaces) {
  const std::string path = dir_.Path("overrides.jsonl");
  std::unique_ptr<FileOverrideBook> book = OpenBook(path);
  ASSERT_NE(book, nullptr);
  ASSERT_TRUE(PutNow(*book, Make("acme", 5)).ok());
  now_us_ += 1000;
  ASSERT_TRUE(PutNow(*book, Make("acme", 9, "", "dave")).ok());
  EXPECT_EQ(Count(*book), 1u);
  const Override* acme = For(*book, "acme");
  ASSERT_NE(acme, nullptr);
  ASSERT_EQ(acme->limits.size(), 1u);
  EXPECT_EQ(acme->limits[0].limit.requests, 9u);
  EXPECT_EQ(acme->set_by, "dave");
  EXPECT_THAT(FileLines(path), SizeIs(1));
  std::unique_ptr<FileOverrideBook> again = OpenBook(path);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Count(*again), 1u);
  const Override* reread = For(*again, "acme");
  ASSERT_NE(reread, nullptr);
  EXPECT_EQ(reread->limits[0].limit.requests, 9u);
}

TEST_F(OverrideBookTest, ExpiredOnesAreDroppedAtTheNextWrite) {
  const std::string path = dir_.Path("overrides.jsonl");
  std::unique_ptr<FileOverrideBook> book = OpenBook(path);
  ASSERT_NE(book, nullptr);
  ASSERT_TRUE(PutNow(*book, Make("acme", 5, R"(, "for": "10s")")).ok());
  ASSERT_TRUE(PutNow(*book, Make("keep", 5)).ok());
  now_us_ += 10 * test::kSecondUs;         // acme's end
  EXPECT_EQ(For(*book, "acme"), nullptr);  // ended, though still listed until the next write
  ASSERT_TRUE(PutNow(*book, Make("bob", 7)).ok());
  EXPECT_EQ(Count(*book), 2u);
  EXPECT_NE(For(*book, "keep"), nullptr);
  EXPECT_NE(For(*book, "bob"), nullptr);
  const std::vector<std::string> lines = FileLines(path);
  ASSERT_THAT(lines, SizeIs(2));
  for (const std::string& line : lines) EXPECT_THAT(line, ::testing::Not(HasSubstr("acme")));
}

TEST_F(OverrideBookTest, AGarbageLineIsSkipped) {
  const std::string good = RenderOverride(Make("acme", 5, R"(, "reason": "by hand")"));
  const std::string path =
      dir_.Write("overrides.jsonl", "this is { not an override\n\n" + good + "\n");
  std::unique_ptr<FileOverrideBook> book = OpenBook(path);
  ASSERT_NE(book, nullptr);
  EXPECT_EQ(Count(*book), 1u);
  const Override* acme = For(*book, "acme");
  ASSERT_NE(acme, nullptr);
  EXPECT_EQ(acme->reason, "by hand");
  // Gone from the file at the next change.
  ASSERT_TRUE(PutNow(*book, Make("bob", 7)).ok());
  const std::vector<std::string> lines = FileLines(path);
  ASSERT_THAT(lines, SizeIs(2));
  EXPECT_EQ(lines[0], good);
}

TEST_F(OverrideBookTest, AFailedWriteKeepsTheSetInForce) {
  const std::string path = dir_.Path("state/overrides.jsonl");
  std::filesystem::create_directories(dir_.Path("state"));
  std::unique_ptr<FileOverrideBook> book = OpenBook(path);
  ASSERT_NE(book, nullptr);
  ASSERT_TRUE(PutNow(*book, Make("acme", 5)).ok());
  const std::shared_ptr<const OverrideSet> before = book->Current();
  ASSERT_NE(before, nullptr);
  std::filesystem::remove_all(dir_.Path("state"));
  const absl::Status put = PutNow(*book, Make("bob", 7));
  EXPECT_FALSE(put.ok());
  EXPECT_THAT(put.message(), HasSubstr(path));
  EXPECT_EQ(book->Current(), before);  // the very same set
  EXPECT_EQ(For(*book, "bob"), nullptr);
  EXPECT_NE(For(*book, "acme"), nullptr);
  const absl::StatusOr<bool> removed = RemoveNow(*book, "acme");
  EXPECT_FALSE(removed.ok());
  EXPECT_EQ(book->Current(), before);
}

TEST_F(OverrideBookTest, OpenMakesAMissingDirectory) {
  const std::string path = dir_.Path("missing/deeper/overrides.jsonl");
  std::unique_ptr<FileOverrideBook> book = OpenBook(path);  // nothing to read: none
  ASSERT_NE(book, nullptr);
  EXPECT_EQ(book->Current(), nullptr);
  EXPECT_TRUE(std::filesystem::is_directory(dir_.Path("missing/deeper")));
  ASSERT_TRUE(PutNow(*book, Make("acme", 5)).ok());
  EXPECT_THAT(FileLines(path), SizeIs(1));
}

TEST_F(OverrideBookTest, OpenFailsWhereNoDirectoryCanBeMade) {
  dir_.Write("plain", "a file, not a directory\n");
  const std::string path = dir_.Path("plain/overrides.jsonl");
  const absl::StatusOr<std::unique_ptr<FileOverrideBook>> book =
      FileOverrideBook::Open(path, *config_, [this] { return now_us_; });
  ASSERT_FALSE(book.ok());
  EXPECT_THAT(book.status().message(), HasSubstr(dir_.Path("plain")));
}

TEST_F(OverrideBookTest, AnEmptyPathKeepsThemInMemory) {
  std::unique_ptr<FileOverrideBook> book = OpenBook("");
  ASSERT_NE(book, nullptr);
  EXPECT_EQ(book->Current(), nullptr);
  EXPECT_THAT(book->where(), HasSubstr("memory"));
  ASSERT_TRUE(PutNow(*book, Make("acme", 5)).ok());
  ASSERT_NE(book->Current(), nullptr);
  EXPECT_NE(For(*book, "acme"), nullptr);
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
  ASSERT_TRUE(RemoveNow(*book, "acme").value_or(false));
  EXPECT_EQ(book->Current(), nullptr);
}

TEST_F(OverrideBookTest, ParseStoredOverridesSkipsWhatDoesNotParse) {
  const std::string good = RenderOverride(Make("acme", 5));
  std::vector<std::string> skipped;
  const std::vector<Override> all =
      ParseStoredOverrides({"{]", good, R"({"domain": "api"})"}, *config_, now_us_, &skipped);
  ASSERT_THAT(all, SizeIs(1));
  EXPECT_EQ(all[0].entries, (std::vector<Entry>{{"api_key", "acme"}}));
  EXPECT_THAT(skipped, SizeIs(2));
}

TEST_F(OverrideBookTest, WithOverrideReplacesAndDropsTheExpired) {
  std::vector<Override> all = {Make("acme", 5), Make("old", 5, R"(, "for": "1s")")};
  all = WithOverride(std::move(all), Make("bob", 7), now_us_);
  EXPECT_THAT(all, SizeIs(3));
  all = WithOverride(std::move(all), Make("acme", 9), now_us_ + test::kSecondUs);
  ASSERT_THAT(all, SizeIs(2));  // old ended, acme replaced
  EXPECT_EQ(all[0].entries[0].value, "bob");
  EXPECT_EQ(all[1].entries[0].value, "acme");
  EXPECT_EQ(all[1].limits[0].limit.requests, 9u);
}

}  // namespace
}  // namespace sluice::rules
