--- Part of decide.lua (assembled by src/backend/redis/CMakeLists.txt; lines opening with three
--- dashes at a part's top are left out): the script's contract (modes, arguments, replies,
--- stored values, fences, packed states), arithmetic helpers and the states' encoding.
#!lua flags=allow-cross-slot-keys
-- (The line above lets a call on a cluster node use keys of several of that node's slots, given
-- in ARGV (mode 3): RedisStore batches the requests headed to one node. Declared KEYS must still
-- share a slot, and a key the node does not serve fails the call before anything is written.)
-- sluice: decide the limits of one or more requests, each all-or-nothing, on Redis.
--
-- A transcription of src/algo/algorithms.cc and MemoryStore::DecideAll (src/backend/memory); the two are
-- run on the same vectors by src/backend/redis/scripts_test.cc. The clock is Redis's own TIME: no client
-- clock is ever used, so clock skew between sluice instances cannot matter.
--
-- ARGV[1]: 1 = decide and write, 0 = only evaluate (what would happen; nothing is written),
--          2 = refund (give back what admitted requests consumed: see "Refunds" below),
--          3 = as 1, with the keys in ARGV instead of KEYS (a cluster node's batch: see above),
--          4 = take a lease (consistency: leased; see "Leases" below), unless the state is
--              fenced (see "Fences" below)
--          5 = merge admissions made elsewhere, and fence the states (consistency: eventual;
--              see "Merges" below)
--          6 = take several leases, each as mode 4 would, in turn (see "Leases" below)
-- ARGV[2]: the deadline, Redis's time in µs (16 digits; 0: none): a call that finds TIME past it
--          changes nothing and returns {now_us, -1}. The client has given up on the call by
--          then (or is about to; redis::Deadline), so what it would decide nobody would get: it
--          must not consume anything either (a call queued while Redis hung runs when it resumes).
-- ARGV[3]: R, the number of requests; they are decided in turn, at the same instant, each
--          all-or-nothing on its own (as R calls of DecideAll would be)
-- mode 3 only: ARGV[4] the number of keys K, then the K keys (what KEYS holds otherwise)
-- then L, the number of kinds of item in the call, then the L kinds, each 6 little-endian
-- doubles (struct '<dddddd': one unpack per kind, not per item):
--   algorithm, N, W (µs), capacity, cost, flags
--   algorithm: 0 token_bucket, 1 leaky_bucket, 2 fixed_window, 3 sliding_log, 4 sliding_window
--   capacity:  Limit::Capacity() (the bucket size; N for the others)
--   flags:     1 = count_denied (record a denied request's cost: algo::RecordOverdraft), 2 = shadow,
--              4 = the state is a field of a hash (see "Packed states" below), 8 = a calendar
--              window (see "Calendar windows" below), 16 = a penalty (see "Penalties" below:
--              six more doubles follow in the kind's argument, in decisions only)
-- then the plan, one string of counts, each a byte below 255, else 255 and three bytes
-- (little-endian): per request its item count M, then per item the number of its kind (1..L) and
-- the number of its state (1..S); the states are numbered in the order the items first use them;
-- then, for each state kept in a hash field (its first item's kind has flag 4), in order, the
-- field's name.
-- KEYS: each state's string key, or the hash that holds its field, by state number (one key
-- per state, however many items use it).
-- Returns {now_us, then per item: remaining (when denied, -1 - remaining), reset_after_us, then
-- when denied retry_after_us (-1: never), when a leaky_bucket allowed it delay_us}; a request is
-- allowed when all its items that are not shadow are. (Arguments and reply elements cost Redis
-- more than the arithmetic: a kind is sent once however many items share it, a key once however
-- many items use it, and an item's reply is two or three numbers.)
--
-- Arithmetic: Lua numbers are doubles, exact for integers below 2^53. sluice only sends limits
-- whose products stay below that (redis::CheckExactRange: capacity * W and 2 * N * W). Integer
-- division is r = a % b, then (a - r) / b, both exact: Lua's a % b is a - floor(a / b) * b, and
-- for integers |a| < 2^53, b >= 1 the rounded quotient never crosses an integer (a/b = q + r/b is
-- at least 1/b from q + 1, more than the rounding error |a/b| * 2^-53), so the floor is exact,
-- and so are the product and the difference.
--
-- Stored values (one string key per limiter key and limit), little-endian doubles:
--   buckets:        idle_at, frac, expiry idle_at = ceil(TAT), frac = TAT's remainder in 1/N µs
--   fixed_window:   idle_at, count        idle_at = end of the window
--   sliding_window: idle_at, prev, cur
--   sliding_log:    idle_at, expiry, then at, cost per entry (oldest first)
-- Every key expires (PXAT) just past idle_at, when its state is back to that of a new key; the
-- buckets and sliding_log, whose idle_at moves on with every admitted request, get 1/8 of their
-- remaining life on top, so that the next requests usually find the expiry good as it is and
-- write with SET KEEPTTL (setting an expiry costs about half as much again); they keep the expiry
-- (ms) they were given in their value, so that a write knows whether it still covers idle_at
-- without asking Redis. (A value without it, 8 bytes shorter, as written before sluice kept it
-- there, gets a new expiry on its next write. The 24 bytes of a bucket's value take no more of
-- Redis's memory than 16: both fit the same allocation.) An existing key's expiry is never
-- earlier than its idle_at.
--
-- Fences (consistency: eventual; see "Merges" below): a merge may fence its state for a while,
-- and a lease of a fenced state takes nothing. A fence is a string key of its own, `<key>:f` for
-- a state with a key of its own, `<key>:f:<field>` for a packed one: the state's key with a
-- suffix, so it has the state's hash tag and slot, and is never a state's key (after its tag, a
-- state's key has hex digits and at most one ':', none without redis.buckets; a fence key one
-- ':' more than its state's, or one right after the tag). Its value is the fence's end (µs, in decimal), its expiry
-- (PXAT) that end rounded up to the ms: it goes on its own, and one whose end has passed while
-- Redis still holds it counts for nothing.
--
-- Calendar windows (a fixed_window whose windows follow a time zone's calendar, Limit::calendar):
-- Redis has no time zones, so the sender works out the boundaries from the zone's rules near its
-- own clock and sends two, in place of W and the capacity: B, the boundary nearest its clock,
-- and E, the end of the window that starts at B. Redis's `now` (or a refund's decision time) is
-- in the window ending at B when it is before B, else in the one ending at E: right while the
-- clocks differ by less than half a window (12 hours at least). A call whose TIME is not before
-- E changes nothing and fails, naming the clocks. Inside the script such a kind's W is the
-- negated end of the window that holds its `now`: fixed() and the rest read -W as that end.
--
-- Penalties (Limit::penalty, algo/penalty.h): a penalized kind carries six more doubles, after,
-- within, block, growth, max and forget (µs). Its item's penalty state is a string key of its
-- own, `<key>:p` (`<key>:p:<field>` for a packed state; the fences' pattern, so the same slot),
-- five doubles: the span's first denial, the denials in it, the offences, the last offence's
-- time and the end of the block; expiring (PXAT) when it holds nothing any more. While the
-- block runs the item is denied without its limit deciding (its reply: remaining 0, the reset
-- the later of the limit's and the block's, and retry -2 - the block's rest: a penalty); a
-- decision that commits records each denial of its limit (algo::RecordDenial), and the one that
-- starts a block replies so too. A penalized state is never decided through decide_new's memo.
--
-- Packed states: an item with a field keeps its state in that field of a hash shared with other
-- limiter keys (redis.buckets), which costs far less memory per state than a key of its own.
-- Redis 7.0 has no expiry per field, so: a field whose idle_at has passed counts as absent (its
-- state is that of a new key anyway); the hash's expiry is moved on to cover the latest idle_at
-- written into it (in steps of at least a second), so the hash goes soon after its last state
-- is back to initial; and one new field in three makes the script look at 9 random fields of
-- its hash and delete those whose idle_at has passed (3 looks per new field), so a hash that
-- never goes idle holds about one dead field for every two live ones at most. Only states of
-- bounded size are packed (not sliding_log).

local floor, min, max = math.floor, math.min, math.max
local unpack_list = unpack  -- Lua's: a table's elements as values
local pack, unpack = struct.pack, struct.unpack
local call = redis.call

-- The hot paths below write these out in place (a Lua function call costs as much as a dozen
-- arithmetic operations): a % b, then (a - r) / b.
local function divmod(a, b)  -- integers, b > 0: floor(a / b), a mod b
  local r = a % b
  return (a - r) / b, r
end

local function ceildiv(a, b)
  local r = a % b
  if r > 0 then return (a - r) / b + 1 end
  return (a - r) / b
end

local function window_start(now, w)
  return now - now % w
end

-- The end of a fixed_window's window that holds t: W < 0 carries it (a calendar's, see above).
local function window_end(t, w)
  if w < 0 then return -w end
  return t - t % w + w
end

-- A calendar kind's W for instant t (see "Calendar windows"): the negated end of t's window, or
-- nil when t is not before E.
local function calendar_w(t, b, e)
  if t < b then return -b end
  if t < e then return -e end
  return nil
end

local calendar_skew = 'sluice: Redis time is past the calendar window its caller sent; '
  .. 'the clocks of Redis and sluice differ by hours'

-- The kind of a decision or refund item: algorithm, N, W, capacity, cost, flags; a calendar
-- kind's W worked out for instant t (nil when t is past it), and its capacity N.
local function parse_kind(arg, t)
  local alg, n, w, cap, cost, flags = unpack('<dddddd', arg)
  if flags % 16 >= 8 then
    w, cap = calendar_w(t, w, cap), n
  end
  return alg, n, w, cap, cost, flags
end

-- --- states: {idle, a, b} for the O(1) algorithms; {idle, 0, 0, log = {at1, cost1, at2, ...}}
-- (a state's record, below, has more after these)

-- Fills st[1..3] (and st.log for sliding_log) from a stored value. A key's expiry kept in its
-- value (buckets, sliding_log) is 0 when the value has none (a field, or a value written before
-- sluice kept it there).
local function parse_into(st, alg, raw)
  if alg == 3 then
    local log, first = {}, 9
    st[2] = 0
    if #raw % 16 == 0 then
      st[2] = unpack('<d', raw, 9)
      first = 17
    end
    for i = first, #raw - 15, 16 do
      local at, cost = unpack('<dd', raw, i)
      log[#log + 1] = at
      log[#log + 1] = cost
    end
    st[1], st[3], st.log = unpack('<d', raw), 0, log
  elseif alg == 4 or #raw >= 24 then
    st[1], st[2], st[3] = unpack('<ddd', raw)
  else
    st[1], st[2] = unpack('<dd', raw)
    st[3] = 0
  end
end

local function parse(alg, raw)
  local st = {}
  parse_into(st, alg, raw)
  return st
end

-- The value to store; `field`: the state is a hash field (whose expiry is the hash's).
local function encode(alg, st, field)
  if alg == 3 then
    local parts = {pack('<dd', st[1], st[2])}
    local log = st.log
    for i = 1, #log, 2 do parts[#parts + 1] = pack('<dd', log[i], log[i + 1]) end
    return table.concat(parts)
  end
  if alg == 4 or (alg ~= 2 and not field) then return pack('<ddd', st[1], st[2], st[3]) end
  return pack('<dd', st[1], st[2])
end

local function copy(st)
  if st.log then
    local log = {}
    for i = 1, #st.log do log[i] = st.log[i] end
    return {st[1], st[2], st[3], log = log}
  end
  return {st[1], st[2], st[3]}
end

-- Puts a state saved by copy back (in place: its record stays where it is listed).
local function restore(st, saved)
  st[1], st[2], st[3] = saved[1], saved[2], saved[3]
  if saved.log then st.log = copy(saved).log end
end

-- Where a state keeps its key's expiry (ms), by algorithm: the buckets and sliding_log, whose
-- idle_at moves on with every admitted request, so that a write knows without asking Redis
-- whether the expiry still covers the state. (The windows' expiry is their idle_at.)
local expiry_slot = {[0] = 3, [1] = 3, [3] = 2}

-- An expiry as a command argument. (A number given to redis.call is formatted as %.17g, which
-- costs more than a whole GET; the keys of one call mostly share a few expiries.)
local decimals = {}
local function decimal(ms)
  local text = decimals[ms]
  if not text then
    text = string.format('%d', ms)
    decimals[ms] = text
  end
  return text
end

-- The expiry (ms) of a key whose state is idle from `idle` (µs) on.
local function expiry(alg, idle, now)
  if alg == 2 or alg == 4 then return ceildiv(idle, 1000) end  -- idle_at stays put in a window
  return ceildiv(idle + floor((idle - now) / 8), 1000)
end


-- --- penalties (see "Penalties" above; algo::RecordDenial and algo::BlockOf, transcribed)

-- A penalized kind's six numbers {after, within, block, growth, max, forget}, or nil.
local function parse_penalty(arg, flags)
  if flags < 16 then return nil end
  return {unpack('<dddddd', arg, 49)}
end

local function penalty_key(key, field)
  if field then return key .. ':p:' .. field end
  return key .. ':p'
end

-- Records a denial at `now` in the state ps = {span start, denials, offences, last offence,
-- blocked until}; returns the block it starts (0: none).
local function record_denial(ps, pen, now)
  if ps[5] > now then return 0 end
  if ps[2] == 0 or now - ps[1] >= pen[2] then
    ps[1], ps[2] = now, 0
  end
  ps[2] = ps[2] + 1
  if ps[2] < pen[1] then return 0 end
  ps[2] = 0
  if ps[3] > 0 and now - ps[4] >= pen[6] then ps[3] = 0 end
  ps[3], ps[4] = ps[3] + 1, now
  local block = pen[3]
  for _ = 2, ps[3] do
    if block >= pen[5] then break end
    block = block * pen[4]
  end
  if block >= pen[5] then block = pen[5] else block = floor(block) end
  ps[5] = now + block
  return block
end
