// The override books' common part and the file book (overrides.h).

#include "rules/override_book.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "fmt/format.h"
#include "util/log.h"

namespace sluice::rules {

void OverrideBook::Publish(std::vector<Override> all) {
  const bool any = !all.empty();
  current_.store(std::make_shared<const OverrideSet>(std::move(all)), std::memory_order_release);
  any_.store(any, std::memory_order_release);
}

std::vector<Override> ParseStoredOverrides(const std::vector<std::string>& items,
                                           const Config& config, int64_t now_us,
                                           std::vector<std::string>* skipped) {
  std::vector<Override> all;
  for (const std::string& item : items) {
    absl::StatusOr<Override> o = ParseOverride(item, config, now_us, /*stored=*/true);
    if (o.ok()) {
      all.push_back(std::move(*o));
    } else if (skipped != nullptr) {
      skipped->push_back(std::string(o.status().message()));
    }
  }
  return all;
}

std::vector<Override> WithOverride(std::vector<Override> all, Override o, int64_t now_us) {
  std::erase_if(all, [&](const Override& old) {
    return old.Expired(now_us) || (old.domain == o.domain && old.entries == o.entries);
  });
  all.push_back(std::move(o));
  return all;
}

absl::StatusOr<std::unique_ptr<FileOverrideBook>> FileOverrideBook::Open(
    std::string path, const Config& config, std::function<int64_t()> clock_us) {
  std::unique_ptr<FileOverrideBook> book(
      new FileOverrideBook(std::move(path), std::move(clock_us)));
  if (book->path_.empty()) return book;
  const std::filesystem::path dir = std::filesystem::path(book->path_).parent_path();
  if (std::error_code made; !dir.empty() && !std::filesystem::is_directory(dir) &&
                            !std::filesystem::create_directories(dir, made)) {
    return absl::FailedPreconditionError(fmt::format(
        "cannot make the state directory {} for the overrides: {}", dir.string(), made.message()));
  }
  std::ifstream in(book->path_);
  if (!in) {
    if (errno == ENOENT) return book;  // none kept yet
    return absl::FailedPreconditionError(
        fmt::format("cannot read the overrides in {}: {}", book->path_, std::strerror(errno)));
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(std::move(line));
  }
  if (in.bad()) {
    return absl::FailedPreconditionError(
        fmt::format("cannot read the overrides in {}", book->path_));
  }
  std::vector<std::string> skipped;
  absl::MutexLock lock(&book->mu_);
  book->all_ = ParseStoredOverrides(lines, config, book->clock_us_(), &skipped);
  for (const std::string& why : skipped) {
    util::Log().warn("overrides in {}: one skipped: {}", book->path_, why);
  }
  book->Publish(book->all_);
  return book;
}

absl::Status FileOverrideBook::Keep(std::vector<Override> all) {
  if (!path_.empty()) {
    const std::string temporary = path_ + ".new";
    {
      std::ofstream out(temporary, std::ios::trunc);
      for (const Override& o : all) out << RenderOverride(o) << '\n';
      out.flush();
      if (!out) {
        const int error = errno;
        std::remove(temporary.c_str());
        return absl::UnavailableError(
            fmt::format("cannot write {}: {}", temporary, std::strerror(error)));
      }
    }
    if (std::rename(temporary.c_str(), path_.c_str()) != 0) {
      const int error = errno;
      std::remove(temporary.c_str());
      return absl::UnavailableError(
          fmt::format("cannot replace {}: {}", path_, std::strerror(error)));
    }
  }
  all_ = all;
  Publish(std::move(all));
  return absl::OkStatus();
}

void FileOverrideBook::Put(Override o, Done done) {
  absl::Status kept;
  {
    absl::MutexLock lock(&mu_);
    kept = Keep(WithOverride(all_, std::move(o), clock_us_()));
  }
  done(std::move(kept));
}

void FileOverrideBook::Remove(std::string domain, std::vector<Entry> entries, RemoveDone done) {
  absl::StatusOr<bool> removed = false;
  {
    absl::MutexLock lock(&mu_);
    std::vector<Override> all = all_;
    const size_t before = all.size();
    std::erase_if(all,
                  [&](const Override& o) { return o.domain == domain && o.entries == entries; });
    if (all.size() != before) {
      absl::Status kept = Keep(std::move(all));
      removed = kept.ok() ? absl::StatusOr<bool>(true) : absl::StatusOr<bool>(kept);
    }
  }
  done(std::move(removed));
}

std::string FileOverrideBook::where() const {
  return path_.empty() ? "memory (kept until the process ends: no state directory)"
                       : "file " + path_;
}

}  // namespace sluice::rules
