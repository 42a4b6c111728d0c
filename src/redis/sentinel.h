// Redis Sentinel: a Client (client.h) for the master that a set of sentinels names.
//
// The client asks the sentinels in turn (SENTINEL get-master-addr-by-name) where the master is,
// and sends every command there as to a single server. It follows a failover three ways: a
// subscription to +switch-master on one sentinel, a periodic question (SentinelOptions::
// check_interval), and a question at once when the master's connection fails or answers
// -READONLY (a demoted master, whose connections are then closed). While no master is known or
// connected, commands fail at once (Unavailable) and Ready() is false, last_error() saying why.
// Everything runs on the client's own I/O thread; callbacks too. Safe for concurrent use.
// The parsers below are the wire forms it reads, for tests.

#ifndef SLUICE_REDIS_SENTINEL_H_
#define SLUICE_REDIS_SENTINEL_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "redis/client.h"
#include "redis/resp.h"

namespace sluice::redis {

// Where a master is: the reply to SENTINEL get-master-addr-by-name, or +switch-master's news.
struct MasterAddress {
  std::string master;  // the master's name (+switch-master only)
  std::string host;
  int port = 0;

  std::string Address() const;  // "host:port" ([host]:port for IPv6)
};

// SENTINEL get-master-addr-by-name's reply: [host, port]; nullopt for nil (the sentinel does not
// know the master); InvalidArgument for an error reply or another shape.
absl::StatusOr<std::optional<MasterAddress>> ParseMasterAddr(const Reply& reply);

// A +switch-master message's payload: "NAME OLD-HOST OLD-PORT NEW-HOST NEW-PORT", as the new
// master's address; nullopt when malformed.
std::optional<MasterAddress> ParseSwitchMaster(std::string_view payload);

// A sentinel's "host:port" ("[v6]:port"; the port 26379 when left out) as an endpoint without a
// login; InvalidArgument naming the problem.
absl::StatusOr<Endpoint> ParseSentinelAddress(std::string_view address);

// A reply that says the server is a replica now: -READONLY (also inside a script's error).
bool IsReadOnlyError(const Reply& reply);

// The client; `options.sentinel` set and checked by Client::Create, `options.connection.tls` the
// context of whichever of the master and the sentinels are reached over TLS.
std::unique_ptr<Client> MakeSentinelClient(Client::Options options);

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_SENTINEL_H_
