// The Redis protocol (RESP2) as values: connection URLs, commands encoded as arrays of bulk
// strings, and replies decoded by hiredis's reader (the only part of hiredis sluice uses; the
// connections are sluice's own, on Asio: see connection.h).

#ifndef SLUICE_REDIS_RESP_H_
#define SLUICE_REDIS_RESP_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct redisReader;

namespace sluice::redis {

// Where a Redis server is and how to log in: redis://[user:pass@]host:port[/db], or rediss://
// for TLS (tls.h). The user may be empty (`redis://:pass@host:port`, password-only AUTH); the
// port defaults to 6379 and the database to 0. IPv6 hosts are written in brackets.
struct Endpoint {
  std::string host;
  int port = 6379;
  std::string user;
  std::string password;
  int db = 0;
  bool tls = false;  // rediss://

  std::string Address() const;  // "host:port", for messages
};

// InvalidArgument naming the problem.
absl::StatusOr<Endpoint> ParseUrl(std::string_view url);

struct Reply {
  enum class Type { kString, kArray, kInteger, kNil, kStatus, kError };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string str;  // kString, kStatus, kError
  std::vector<Reply> elements;

  bool IsError() const { return type == Type::kError; }
};

// Appends one command, a RESP array of bulk strings, to `out`.
void AppendCommand(std::string* out, std::span<const std::string_view> args);
void AppendCommand(std::string* out, std::initializer_list<std::string_view> args);

// Turns a byte stream into replies. Not thread-safe.
class ReplyReader {
 public:
  ReplyReader();
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  void Feed(const char* data, size_t size);
  // The next complete reply, nullopt if more bytes are needed; an error if the stream is not
  // RESP (the connection must then be dropped).
  absl::StatusOr<std::optional<Reply>> Next();

 private:
  redisReader* reader_;
};

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_RESP_H_
