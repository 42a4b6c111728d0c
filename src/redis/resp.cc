#include "redis/resp.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <memory>

#include "fmt/compile.h"
#include "fmt/format.h"

namespace sluice::redis {
namespace {

// hiredis's reader builds our Reply tree itself, through its object functions, instead of a tree
// of its own that would then be copied (a batch's reply has an element per number). A child is
// made in place in its parent's elements, so only the root is allocated and only the root is
// freed (hiredis frees nothing else: r->reply is the root).
//
// The parent's elements grow as its children arrive, not to the count its header announces: that
// count is the peer's word, and "*2000000000\r\n" alone would otherwise allocate 144 GB (found by
// fuzz/resp_fuzz.cc). Growing never moves a Reply hiredis still points to: only the parent's
// vector grows, and its earlier children are complete. createArray still reserves the announced
// count, up to kMaxReservedElements, so a usual reply takes one allocation per array.
constexpr size_t kMaxReservedElements = 4096;

Reply* Place(const redisReadTask* task) {
  if (task->parent == nullptr) return new Reply();
  std::vector<Reply>& siblings = static_cast<Reply*>(task->parent->obj)->elements;
  const size_t idx = static_cast<size_t>(task->idx);
  if (siblings.size() <= idx) siblings.resize(idx + 1);
  return &siblings[idx];
}

void* CreateString(const redisReadTask* task, char* str, size_t len) {
  Reply* r = Place(task);
  r->type = task->type == REDIS_REPLY_STRING   ? Reply::Type::kString
            : task->type == REDIS_REPLY_STATUS ? Reply::Type::kStatus
                                               : Reply::Type::kError;
  r->str.assign(str, len);
  return r;
}

void* CreateArray(const redisReadTask* task, int elements) {
  Reply* r = Place(task);
  r->type = Reply::Type::kArray;
  r->elements.reserve(std::min(static_cast<size_t>(std::max(elements, 0)), kMaxReservedElements));
  return r;
}

void* CreateInteger(const redisReadTask* task, long long value) {
  Reply* r = Place(task);
  r->type = Reply::Type::kInteger;
  r->integer = value;
  return r;
}

void* CreateNil(const redisReadTask* task) {
  Reply* r = Place(task);
  r->type = Reply::Type::kNil;
  return r;
}

void FreeReply(void* reply) { delete static_cast<Reply*>(reply); }

redisReplyObjectFunctions kReplyFunctions = {CreateString, CreateArray, CreateInteger, CreateNil,
                                             FreeReply};

bool ParseInt(std::string_view text, int* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string Endpoint::Address() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

absl::StatusOr<Endpoint> ParseUrl(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        fmt::format("bad Redis URL '{}': {} (redis[s]://[user:pass@]host:port[/db])", url, why));
  };
  Endpoint e;
  std::string_view rest = url;
  if (rest.starts_with("redis://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("rediss://")) {
    rest.remove_prefix(9);
    e.tls = true;
  } else {
    return bad("it must start with redis:// (or rediss:// for TLS)");
  }
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view credentials = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = credentials.find(':');
    if (colon == std::string_view::npos) {
      e.password = std::string(credentials);  // redis://pass@host, as redis-cli reads it
    } else {
      e.user = std::string(credentials.substr(0, colon));
      e.password = std::string(credentials.substr(colon + 1));
    }
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty() && (!ParseInt(db, &e.db) || e.db < 0))
      return bad("the database is not a number");
  }
  std::string_view host = rest;
  std::string_view port;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed [");
    host = rest.substr(1, close - 1);
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("expected :port after ]");
      port = after.substr(1);
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return bad("no host");
  e.host = std::string(host);
  if (!port.empty() && (!ParseInt(port, &e.port) || e.port < 1 || e.port > 65535)) {
    return bad("the port is not a number from 1 to 65535");
  }
  return e;
}

void AppendCommand(std::string* out, std::span<const std::string_view> args) {
  // Compiled formats: a batch's command has an argument per key, and a format string parsed at
  // run time for each cost more than the rest of the encoding.
  fmt::format_to(std::back_inserter(*out), FMT_COMPILE("*{}\r\n"), args.size());
  for (std::string_view a : args) {
    fmt::format_to(std::back_inserter(*out), FMT_COMPILE("${}\r\n"), a.size());
    out->append(a);
    out->append("\r\n");
  }
}

void AppendCommand(std::string* out, std::initializer_list<std::string_view> args) {
  AppendCommand(out, std::span(args.begin(), args.size()));
}

ReplyReader::ReplyReader() : reader_(redisReaderCreateWithFunctions(&kReplyFunctions)) {}

ReplyReader::~ReplyReader() { redisReaderFree(reader_); }

void ReplyReader::Feed(const char* data, size_t size) { redisReaderFeed(reader_, data, size); }

absl::StatusOr<std::optional<Reply>> ReplyReader::Next() {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
    return absl::DataLossError(fmt::format("not a Redis reply stream: {}", reader_->errstr));
  }
  if (raw == nullptr) return std::optional<Reply>();
  std::unique_ptr<Reply> reply(static_cast<Reply*>(raw));
  return std::optional<Reply>(std::move(*reply));
}

}  // namespace sluice::redis
