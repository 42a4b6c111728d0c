// libFuzzer target for the Redis reply reader (redis::ReplyReader, hiredis's RESP2 parser
// building sluice's Reply trees): the bytes a Redis server, or whatever answers on its port,
// sends back. The stream is fed in pieces, as reads from a socket arrive, and read until the
// reader wants more bytes or reports an error; after an error the reader is not used again (the
// connection is dropped).
//
// Input: the first byte is the number of split points (0-15), the next that many bytes their
// positions in the rest (each modulo its length); the rest is the stream.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "redis/resp.h"

using sluice::redis::Reply;
using sluice::redis::ReplyReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t splits = std::min<size_t>(data[0] % 16, size - 1);
  const uint8_t* const split_bytes = data + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data + 1 + splits),
                                size - 1 - splits);

  std::vector<size_t> cuts = {0, stream.size()};
  for (size_t i = 0; i < splits; ++i) {
    cuts.push_back(stream.empty() ? 0 : split_bytes[i] % (stream.size() + 1));
  }
  std::sort(cuts.begin(), cuts.end());

  ReplyReader reader;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::string_view piece = stream.substr(cuts[i], cuts[i + 1] - cuts[i]);
    reader.Feed(piece.data(), piece.size());
    while (true) {
      absl::StatusOr<std::optional<Reply>> reply = reader.Next();
      if (!reply.ok()) {
        if (reply.status().message().empty()) abort();
        return 0;  // the connection would be dropped here
      }
      if (!reply->has_value()) break;  // more bytes needed
    }
  }
  return 0;
}
