// The Lua scripts sluice runs on Redis, and how their arguments and replies are laid out.
//
// decide.lua decides every limit of one request at once, all-or-nothing, with exactly the
// semantics of src/algo and MemoryStore::DecideAll, on Redis's own clock (TIME). See the
// script's header for the layout of keys, arguments, replies and stored values.

#ifndef SLUICE_BACKEND_REDIS_SCRIPTS_H_
#define SLUICE_BACKEND_REDIS_SCRIPTS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "algo/algorithms.h"
#include "backend/exact_range.h"
#include "redis/connection.h"
#include "redis/resp.h"
#include "sluice/limit.h"

namespace sluice::redis {

// The source of decide.lua (SCRIPT LOAD answers with the SHA1 that EVALSHA takes).
std::string_view DecideScript();

// Whether a limit is within the range the script decides exactly (backend/exact_range.h).
using backend::CheckExactRange;

// One item of a decide call.
struct DecideItem {
  const Limit* limit;
  std::string key;  // the Redis key of its state, or of the hash holding it
  uint64_t cost;
  bool count_denied;
  bool shadow;
  std::string field = {};  // the state's field in hash `key`; empty: `key` is a string of its own
  // A calendar window's (Limit::calendar): an instant near Redis's time of the call (the
  // caller's clock), around which the window boundaries sent are found (decide.lua, "Calendar
  // windows").
  int64_t near_us = 0;
};

// The EVALSHA (or, with `sha` empty, EVAL) taking a lease of up to `want` units of `item`'s
// state for at most `life_us` (decide.lua's mode 4; item.cost is not used), unless a merge
// fenced the state (SyncItem::fence_us). Its reply: {now_us, units granted, the lease's end
// (µs), units a request could still take}, in Redis's clock; {now_us, 0, now_us, -1} when
// fenced.
std::string EncodeLease(std::string_view sha, const DecideItem& item, uint64_t want,
                        int64_t life_us);

// One lease of a batch (decide.lua's mode 6): up to `want` units of `item`'s state for at most
// `life_us`, as EncodeLease takes them.
struct LeaseAsk {
  DecideItem item;  // item.cost is not used
  uint64_t want;
  int64_t life_us;
};
// The EVALSHA (or, with `sha` empty, EVAL) taking `asks` in turn, each on its own as
// EncodeLease's call would, their keys as arguments (so that they may be in several slots of one
// cluster node). Its deadline as EncodeDecide's (`deadline_at`). Its reply: {now_us, then per
// ask: units granted, the lease's end, units a request could still take (a fenced state's: 0,
// now_us, -1)}; ParseLeaseReply reads it, and EncodeLease's reply, the same for one ask.
std::string EncodeLeases(std::string_view sha, std::span<const LeaseAsk> asks,
                         size_t* deadline_at = nullptr);
struct LeaseGrant {
  uint64_t granted = 0;
  int64_t ends_us = 0;
  uint64_t left = 0;
  bool fenced = false;  // nothing taken: a merge fenced the state (granted and left are 0)
};
struct LeaseReply {
  int64_t now_us = 0;
  std::vector<LeaseGrant> grants;  // by ask
};
// DeadlineExceeded when the script ran past its deadline (and took nothing); an error for
// anything but `asks` grants.
absl::StatusOr<LeaseReply> ParseLeaseReply(const Reply& reply, size_t asks);

// The whole EVALSHA (or, with `sha` empty, EVAL of the script's text) command deciding
// `requests` in turn, each all-or-nothing; `commit` false evaluates without writing anything.
// `keys_in_argv` (with commit) passes the keys as arguments, not KEYS, so that they may be in
// several slots of one cluster node (see decide.lua).
// The call's deadline goes as kRedisTimeDigits zeros (none); `deadline_at`, when given, gets
// their byte offset in the command, for the connection to write the deadline there
// (Deadline::redis_time_at).
std::string EncodeDecide(std::string_view sha,
                         std::span<const std::span<const DecideItem>> requests, bool commit,
                         bool keys_in_argv = false, size_t* deadline_at = nullptr);
// One request.
std::string EncodeDecide(std::string_view sha, std::span<const DecideItem> items, bool commit,
                         size_t* deadline_at = nullptr);

// The call that gives back what `items` (their cost) consumed when admitted at `decided_at_us`
// (Redis's time, DecideResult::now_us), as algo::RefundCompact / RefundSlidingLog do. Its reply
// is {now_us}.
std::string EncodeRefund(std::string_view sha, std::span<const DecideItem> items,
                         int64_t decided_at_us);

// One state of a merge call (consistency: eventual; decide.lua's mode 5): add `units` admitted
// elsewhere at `counted_at_us` (Redis's time) as algo::ChargeCompact does, then read it back;
// with `fence_us` > 0, also fence it: no lease of it is granted until `fence_us` after the
// merge (Redis's time; a longer fence already there stays).
struct SyncItem {
  DecideItem item;  // item.cost is not used
  uint64_t units;
  int64_t counted_at_us;
  int64_t fence_us = 0;
};
// The EVALSHA (or, with `sha` empty, EVAL) merging `items` in turn, their keys as arguments (so
// that they may be in several slots of one cluster node). Its reply: {now_us, then per item the
// merged state's idle_at, a, b}; ParseSyncReply reads it.
std::string EncodeSync(std::string_view sha, std::span<const SyncItem> items);
struct SyncReply {
  int64_t now_us = 0;
  std::vector<algo::CompactState> states;  // by item
};
absl::StatusOr<SyncReply> ParseSyncReply(const Reply& reply, std::span<const SyncItem> items);

struct DecideResult {
  int64_t now_us = 0;  // Redis's TIME when it decided
  bool allowed = false;
  std::vector<Decision> decisions;
};

// Reads decide.lua's reply to EncodeDecide(..., requests, ...); an error for anything else (e.g.
// an error reply). DeadlineExceeded when the script ran past its deadline (and changed nothing).
absl::StatusOr<std::vector<DecideResult>> ParseDecideReply(
    const Reply& reply, std::span<const std::span<const DecideItem>> requests);
// One request.
absl::StatusOr<DecideResult> ParseDecideReply(const Reply& reply,
                                              std::span<const DecideItem> items);

}  // namespace sluice::redis

#endif  // SLUICE_BACKEND_REDIS_SCRIPTS_H_
