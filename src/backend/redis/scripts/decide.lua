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
--   flags:     1 = count_denied (fixed_window: count even denied requests), 2 = shadow,
--              4 = the state is a field of a hash (see "Packed states" below)
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

local function same(x, y)
  if x[1] ~= y[1] or x[2] ~= y[2] or x[3] ~= y[3] then return false end
  local a, b = x.log, y.log
  if a == nil then return true end
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
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

-- --- the algorithms (see docs/algorithms.md). Each returns allowed, remaining, retry, reset,
-- delay, and changes `st` only when it admits with cost > 0.

local function bucket(st, now, n, w, cap, cost, leaky)
  if n == 0 then
    if cost == 0 then return true, 0, 0, 0, 0 end
    return false, 0, -1, 0, 0
  end
  local debt = 0  -- (TAT - now) * N: how far from full, in 1/N µs
  local idle, frac = st[1], st[2]
  if now < idle then
    if frac ~= 0 then idle = idle - 1 end
    debt = (idle - now) * n + frac
    if debt < 0 then debt = 0 end
  end
  local full, need = cap * w, cost * w
  local allowed = cost <= cap and debt + need <= full
  local retry, delay = 0, 0
  if allowed then
    if leaky then delay = ceildiv(debt, n) end
    if cost > 0 then
      debt = debt + need
      local rest = debt % n
      st[1] = now + (debt - rest) / n + ((rest ~= 0) and 1 or 0)
      st[2] = rest
    end
  elseif cost > cap then
    retry = -1
  else
    retry = ceildiv(debt - (full - need), n)
  end
  local r = debt % w  -- remaining: cap - ceil(debt / w), at least 0; reset: ceil(debt / n)
  local remaining = cap - (debt - r) / w - ((r > 0) and 1 or 0)
  local reset
  if allowed and cost > 0 then
    reset = st[1] - now  -- the TAT just set: now + ceil(debt / n)
  else
    r = debt % n
    reset = (debt - r) / n + ((r > 0) and 1 or 0)
  end
  return allowed, (remaining > 0) and remaining or 0, retry, reset, delay
end

local function fixed(st, now, n, w, cost, count_denied)
  local ends, count
  if now >= st[1] then
    ends = now - now % w + w
    count = 0
  else
    ends = st[1]
    count = st[2]
  end
  local allowed, remaining
  if count_denied then
    if cost > 0 then
      count = count + cost
      st[1] = ends
      st[2] = count
    end
    allowed = count <= n
    remaining = allowed and (n - count) or 0
  else
    allowed = cost <= n and count + cost <= n
    if allowed and cost > 0 then
      count = count + cost
      st[1] = ends
      st[2] = count
    end
    remaining = (count < n) and (n - count) or 0
  end
  local retry = 0
  if not allowed then retry = (cost > n) and -1 or (ends - now) end
  return allowed, remaining, retry, ends - now, 0
end

local function sliding_window(st, now, n, w, cost)
  local current = now - now % w
  local start = current
  local prev, cur = 0, 0
  if now < st[1] then
    prev = st[2]
    cur = st[3]
    start = ((cur > 0) and (st[1] - w) or st[1]) - w
    if current >= start + 2 * w then
      prev, cur, start = 0, 0, current
    elseif current == start + w then
      prev, cur, start = cur, 0, current
    end
  end
  local e = now - start  -- how far into the current window, in [0, w - 1]
  if e < 0 then e = 0 elseif e > w - 1 then e = w - 1 end
  local prev_weight = 0
  if prev > 0 then prev_weight = prev * (w - e) end
  local limit_scaled = n * w
  local allowed = cost <= n and prev_weight + (cur + cost) * w <= limit_scaled
  if allowed and cost > 0 then
    cur = cur + cost
    st[1] = start + 2 * w
    st[2] = prev
    st[3] = cur
  end
  local estimate = cur
  if prev_weight > 0 then
    local r = prev_weight % w
    estimate = cur + (prev_weight - r) / w + ((r > 0) and 1 or 0)
  end
  local remaining = (estimate >= n) and 0 or (n - estimate)
  local reset = 0
  if cur > 0 then
    reset = start + 2 * w - now
  elseif prev > 0 then
    reset = start + w - now
  end
  local retry = 0
  if not allowed then
    if cost > n then
      retry = -1
    else
      local excess = prev_weight + (cur + cost) * w - limit_scaled
      local to_end = w - e
      retry = -1
      if prev > 0 then
        local x = ceildiv(excess, prev)
        if x <= to_end then retry = x end
      end
      if retry < 0 then
        local into_next = 0
        if cur > 0 and cur + cost > n then into_next = ceildiv((cur + cost - n) * w, cur) end
        retry = to_end + into_next
      end
    end
  end
  return allowed, remaining, retry, reset, 0
end

-- sliding_log: forget entries that stopped counting, evaluate, and record when admitted.
local function sliding_log(st, now, n, w, cost)
  local log = st.log
  if #log > 0 and log[#log - 1] > now then now = log[#log - 1] end
  local live, sum = {}, 0
  for i = 1, #log, 2 do
    if log[i] + w > now then
      live[#live + 1] = log[i]
      live[#live + 1] = log[i + 1]
      sum = sum + log[i + 1]
    end
  end
  st.log = live
  local allowed = cost <= n and sum + cost <= n
  local remaining = n - min(n, sum)
  local reset = (#live > 0) and (live[#live - 1] + w - now) or 0
  local retry = 0
  if not allowed then
    if cost > n then
      retry = -1
    else
      local left = sum
      for i = 1, #live, 2 do
        left = left - live[i + 1]
        if left + cost <= n then
          retry = live[i] + w - now
          break
        end
      end
    end
  elseif cost > 0 then
    if #live > 0 and live[#live - 1] == now then
      live[#live] = live[#live] + cost
    else
      live[#live + 1] = now
      live[#live + 1] = cost
    end
    sum = sum + cost
    st[1] = now + w
    remaining = n - min(n, sum)
    reset = w
  end
  return allowed, remaining, retry, reset, 0
end

-- --- refunds (algo::RefundCompact / RefundSlidingLog): give back `cost` consumed at `at`.
-- Never makes a state better than a new key's; a no-op once the window the request counted in
-- has rolled. Returns true when the state is back to initial (the key can go).

local function refund_bucket(st, now, n, w, cost)
  if n == 0 or st[1] <= now then return st[1] <= now end
  local floor_tat = st[1] - ((st[2] ~= 0) and 1 or 0)
  local debt = (floor_tat - now) * n + st[2] - cost * w
  if debt <= 0 then return true end
  local whole, rest = divmod(debt, n)
  st[1] = now + whole + ((rest ~= 0) and 1 or 0)
  st[2] = rest
  return false
end

local function refund_fixed(st, at, now, w, cost)
  if st[1] <= now then return true end
  if st[1] ~= window_start(at, w) + w then return false end  -- the window rolled
  st[2] = st[2] - min(st[2], cost)
  return st[2] == 0
end

local function refund_sliding_window(st, at, now, w, cost)
  if st[1] <= now then return true end
  local start = window_start(at, w)
  if window_start(now, w) ~= start or st[3] == 0 or st[1] ~= start + 2 * w then return false end
  st[3] = st[3] - min(st[3], cost)
  if st[3] == 0 and st[2] == 0 then return true end
  st[1] = (st[3] > 0) and (start + 2 * w) or (start + w)
  return false
end

local function refund_sliding_log(st, at, now, w, cost)
  local log = st.log
  if at + w > now then
    for i = 1, #log, 2 do
      if log[i] == at then
        log[i + 1] = log[i + 1] - min(log[i + 1], cost)
        if log[i + 1] == 0 then
          table.remove(log, i + 1)
          table.remove(log, i)
        end
        break
      end
    end
  end
  if #log == 0 or log[#log - 1] + w <= now then return true end
  st[1] = log[#log - 1] + w
  return false
end

local function refund(alg, st, at, now, n, w, cost)
  if alg == 0 or alg == 1 then return refund_bucket(st, now, n, w, cost) end
  if alg == 2 then return refund_fixed(st, at, now, w, cost) end
  if alg == 4 then return refund_sliding_window(st, at, now, w, cost) end
  return refund_sliding_log(st, at, now, w, cost)
end

local function decide(alg, st, now, n, w, cap, cost, count_denied)
  if alg == 0 then return bucket(st, now, n, w, cap, cost, false) end
  if alg == 1 then return bucket(st, now, n, w, cap, cost, true) end
  if alg == 2 then return fixed(st, now, n, w, cost, count_denied) end
  if alg == 4 then return sliding_window(st, now, n, w, cost) end
  return sliding_log(st, now, n, w, cost)
end

-- --- leases (consistency: leased): take up to `want` units now, to be spent by the caller at any
-- time until the lease ends, recorded so that no spending in that time can over-admit (the
-- argument, per algorithm: docs/algorithms.md, "Leases"). Returns the units granted (as many as
-- the state admits now, at most `want`), when the lease ends (µs) and what a request could still
-- take after it; changes `st` only when it grants some.
--   fixed_window, sliding_window: counted now in the current window, as a request of that cost;
--     the lease ends with the window (or after `life`, if sooner).
--   token_bucket: counted as consumed at the lease's end e = now + life, and granted only if a
--     request of that cost would be admitted now on the state so recorded (its TAT moved on to e
--     first): whenever the units are spent before e, the bucket could have admitted them then.
--   leaky_bucket (its delays) and sliding_log are not leased: 0 granted.
local function lease(alg, st, now, n, w, cap, want, life)
  if alg == 2 or alg == 4 then
    local _, remaining = decide(alg, st, now, n, w, cap, 0, false)
    local granted = min(want, remaining)
    if granted > 0 then decide(alg, st, now, n, w, cap, granted, false) end
    return granted, min(now + life, window_start(now, w) + w), remaining - granted
  end
  if alg ~= 0 then return 0, now, 0 end
  local e = now + life
  local saved = copy(st)
  -- TAT < e: idle_at = ceil(TAT), frac its remainder (see bucket).
  if (st[2] == 0 and st[1] < e) or (st[2] ~= 0 and st[1] <= e) then st[1], st[2] = e, 0 end
  local _, remaining = bucket(st, now, n, w, cap, 0, false)
  local granted = min(want, remaining)
  if granted > 0 then
    bucket(st, now, n, w, cap, granted, false)
  else
    restore(st, saved)
  end
  return granted, e, remaining - granted
end

-- --- merges (consistency: eventual; algo::ChargeCompact): record `cost` units admitted by an
-- instance at `at` (Redis's time, as the instance estimates it) whatever the limit says, so far
-- as they still count: a bucket's debt grows by them from now; a window's count grows if `at`'s
-- window is now's (sliding_window: or the one before, which still weighs in the estimate).
local function merge(alg, st, at, now, n, w, cost)
  if cost == 0 then return end
  if alg == 0 then
    if n == 0 then return end
    local debt = 0
    local idle, frac = st[1], st[2]
    if now < idle then
      if frac ~= 0 then idle = idle - 1 end
      debt = (idle - now) * n + frac
      if debt < 0 then debt = 0 end
    end
    debt = debt + cost * w
    local rest = debt % n
    st[1] = now + (debt - rest) / n + ((rest ~= 0) and 1 or 0)
    st[2] = rest
    return
  end
  local current, counted = window_start(now, w), window_start(at, w)
  if alg == 2 then
    if counted ~= current then return end
    if now >= st[1] then st[1], st[2] = current + w, 0 end
    st[2] = st[2] + cost
    return
  end
  if alg ~= 4 or (counted ~= current and counted ~= current - w) then return end
  local prev, cur = 0, 0
  if now < st[1] then
    prev, cur = st[2], st[3]
    local start = ((cur > 0) and (st[1] - w) or st[1]) - w
    if current >= start + 2 * w then
      prev, cur = 0, 0
    elseif current == start + w then
      prev, cur = cur, 0
    end
  end
  if counted == current then cur = min(cur + cost, 4294967295) else prev = min(prev + cost, 4294967295) end
  st[1] = (cur > 0) and (current + 2 * w) or (current + w)
  st[2], st[3] = prev, cur
end

-- --- loading and storing states

-- The hash field of an item's argument, or false when its state has a string key of its own.
local function item_field(arg)
  if #arg > 48 then return string.sub(arg, 49) end
  return false
end

-- The stored value (false: none). A packed state past its idle_at is as good as absent.
local function load(key, field)
  if not field then return call('GET', key) end
  return call('HGET', key, field)
end

-- The values of `keys` (false: none), by one MGET per 1000 keys (unpack's limit is a few
-- thousand values).
local function mget(keys)
  local count = #keys
  if count <= 1000 then return call('MGET', unpack_list(keys)) end
  local values = {}
  for first = 1, count, 1000 do
    local part = call('MGET', unpack_list(keys, first, min(first + 999, count)))
    for j = 1, #part do values[first + j - 1] = part[j] end
  end
  return values
end

-- Deletes those of 9 random fields of hash `key` whose states are back to initial (see the
-- header).
local function sweep(key, now)
  local sample = call('HRANDFIELD', key, 9, 'WITHVALUES')
  local dead = {'HDEL', key}
  for i = 1, #sample, 2 do
    local value = sample[i + 1]
    if #value >= 8 and unpack('<d', value) <= now then dead[#dead + 1] = sample[i] end
  end
  if #dead > 2 then call(unpack_list(dead)) end
end

-- --- the requests, in turn; then write what changed

local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local commit = ARGV[1] == '1' or ARGV[1] == '3'
local now_ms = (now - now % 1000) / 1000

-- Writes a state changed by a lease or a merge (the decisions write theirs in bulk, below).
local function store(key, field, alg, st)
  if field then
    call('HSET', key, field, encode(alg, st, field))
    local ms = ceildiv(st[1], 1000)
    if call('PTTL', key) < ms - now_ms then call('PEXPIREAT', key, decimal(ms)) end
  else
    local ms = expiry(alg, st[1], now)
    if expiry_slot[alg] then st[expiry_slot[alg]] = ms end
    call('SET', key, encode(alg, st, false), 'PXAT', decimal(ms))
  end
end

-- Fences (see the header): where the fence of a state is.
local function fence_key(key, field)
  if field then return key .. ':f:' .. field end
  return key .. ':f'
end

-- Whether a fence read as `raw` (GET; false: none) still holds.
local function fenced(raw)
  return raw and tonumber(raw) > now
end

-- Fences a state for `life` µs from now. A fence is only ever moved on, never brought forward:
-- another instance's merge may have fenced the state for longer, for a copy it still uses.
local function fence(key, field, life)
  local fk, ends = fence_key(key, field), now + life
  local held = call('GET', fk)
  if held and tonumber(held) >= ends then return end
  call('SET', fk, string.format('%d', ends), 'PXAT', decimal(ceildiv(ends, 1000)))
end

-- Refunds: ARGV[2] the decision's time (µs, Redis's TIME as the decide call returned it), ARGV[3]
-- the item count M, then per item its kind (six doubles, as for a decision) followed by its hash
-- field if any (the cost is what to give back). Returns {now_us}.
if ARGV[1] == '2' then
  local at = tonumber(ARGV[2])
  for i = 1, tonumber(ARGV[3]) do
    local key = KEYS[i]
    local alg, n, w, _, cost = unpack('<dddddd', ARGV[3 + i])
    local field = item_field(ARGV[3 + i])
    local raw = load(key, field)
    if raw and cost > 0 then
      local st = parse(alg, raw)
      if refund(alg, st, at, now, n, w, cost) then
        if field then call('HDEL', key, field) else call('DEL', key) end
      else
        local value = encode(alg, st, field)
        if value == raw then  -- nothing to write
        elseif field then call('HSET', key, field, value)  -- idle_at only moved back
        else call('SET', key, value, 'KEEPTTL') end
      end
    end
  end
  return {now}
end
-- Leases: takes up to `want` units of the state of `key` (its hash field, if `kind` names one),
-- whose stored value is `raw` (false: none), for at most `life` µs (lease, above), and writes
-- it back if it granted some. Returns the units granted, the lease's end (µs) and units a request
-- could still take.
local function take_lease(key, kind, raw, life, want)
  local alg, n, w, cap = unpack('<dddddd', kind)
  local field = item_field(kind)
  local st = {0, 0, 0}
  if raw then st = parse(alg, raw) end
  if field and st[1] <= now then st = {0, 0, 0} end  -- a packed state past idle_at is absent
  local granted, ends, left = lease(alg, st, now, n, w, cap, want, life)
  if granted > 0 then store(key, field, alg, st) end
  return granted, ends, left
end
-- One lease: ARGV[2] the lease's longest life (µs), ARGV[3] the units wanted, ARGV[4] the item's
-- kind (six doubles, as for a decision) followed by its hash field if any; KEYS[1] its key.
-- Returns {now_us, units granted, the lease's end (µs), units a request could still take}; for a
-- fenced state (see the header) {now_us, 0, now_us, -1}: nothing taken, and -1, which no lease
-- leaves, says why (a lease taken now would be hidden from the copy the fence is for).
-- (Unspent units of a window's lease go back as a refund at a time inside the lease: mode 2.)
if ARGV[1] == '4' then
  local key, kind = KEYS[1], ARGV[4]
  local field = item_field(kind)
  if fenced(call('GET', fence_key(key, field))) then return {now, 0, now, -1} end
  local granted, ends, left =
    take_lease(key, kind, load(key, field), tonumber(ARGV[2]), tonumber(ARGV[3]))
  return {now, granted, ends, left}
end
-- Several leases (a batch: RedisStore queues the leases headed to one node and sends them
-- together): ARGV[2] the deadline, as for a decision (past it nothing is taken and the reply is
-- {now_us, -1}); ARGV[3] the lease count R; then per lease four arguments: its key, its kind
-- (as for mode 4), its longest life (µs) and the units wanted. The keys are arguments, as in mode
-- 3 (a cluster node's batch). They are taken in turn, each on its own as R calls of mode 4 would
-- (at one instant: a later lease of a state sees what an earlier one took; one of a fenced state
-- takes nothing, and the others are taken as if it were not there). Every state and its fence is
-- read before any state is written, so a call on a cluster node that no longer serves one of the
-- keys fails having changed nothing. Returns {now_us, then per lease: units granted, the lease's
-- end (µs), units a request could still take (a fenced state's: 0, now_us, -1, as for mode 4)}.
if ARGV[1] == '6' then
  local deadline = tonumber(ARGV[2])
  if deadline > 0 and now > deadline then return {now, -1} end  -- too late: nothing is taken
  local count = tonumber(ARGV[3])
  local raws, fences = {}, {}  -- by lease: its state's value (false: none); whether fenced
  for i = 1, count do
    local at = 4 * i
    local key, field = ARGV[at], item_field(ARGV[at + 1])
    fences[i] = fenced(call('GET', fence_key(key, field)))
    if not fences[i] then raws[i] = load(key, field) end
  end
  local reply, written = {now}, {}  -- written: the states a lease of this call changed
  for i = 1, count do
    local granted, ends, left = 0, now, -1
    if not fences[i] then
      local at = 4 * i
      local key, kind = ARGV[at], ARGV[at + 1]
      local field = item_field(kind)
      local state = field and (key .. '\0' .. field) or key
      local raw = raws[i]
      if written[state] then raw = load(key, field) end
      granted, ends, left =
        take_lease(key, kind, raw, tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]))
      if granted > 0 then written[state] = true end
    end
    reply[#reply + 1] = granted
    reply[#reply + 1] = ends
    reply[#reply + 1] = left
  end
  return reply
end
-- Merges: ARGV[2] the item count M, then per item four arguments: its key, its kind (six
-- doubles, as for a decision, the cost being the units to merge) followed by its hash field if
-- any, when they were admitted (µs, Redis's time as the instance estimates it), and how long to
-- fence the state for from now (µs; 0: its fence, if any, is left as it is; see the header). A
-- read (no units) fences too: the instance decides on the state it reads back, and a lease
-- taken after this call would be hidden from it until its next merge. The keys are arguments,
-- as in mode 3 (a cluster node's batch). Returns {now_us, then per item its state after the
-- merge: idle_at, a, b (algo::CompactState: a bucket's frac, 0; a fixed window's count, 0; a
-- sliding window's prev, cur), or 0, 0, 0 for a state back to initial}.
if ARGV[1] == '5' then
  local reply = {now}
  for i = 1, tonumber(ARGV[2]) do
    local at = 4 * i - 1
    local key, kind = ARGV[at], ARGV[at + 1]
    local counted, life = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    local alg, n, w, _, cost = unpack('<dddddd', kind)
    local field = item_field(kind)
    local raw = load(key, field)
    local st = {0, 0, 0}
    if raw then st = parse(alg, raw) end
    if st[1] <= now then st = {0, 0, 0} end  -- back to initial
    merge(alg, st, counted, now, n, w, cost)
    if life > 0 then fence(key, field, life) end
    if st[1] > now then
      if cost > 0 then store(key, field, alg, st) end
      reply[#reply + 1] = st[1]
      reply[#reply + 1] = st[2]
      reply[#reply + 1] = (alg == 4) and st[3] or 0
    else
      reply[#reply + 1] = 0
      reply[#reply + 1] = 0
      reply[#reply + 1] = 0
    end
  end
  return reply
end

local deadline = tonumber(ARGV[2])
if deadline > 0 and now > deadline then return {now, -1} end  -- too late: nothing is written
-- Each state is one record, {idle, a, b, stored value (false: none), idle_at as loaded, algorithm,
-- changed} (sliding_log: its log in .log), by its number:
-- records[s] is the state of keys_in[s] (of its field fields[s], for a packed state). The new
-- states of one kind that no other item has used share one record, decide_new's (see there).
local records, fields = {}, {}
local reply = {now}
local arg = 4
local keys_in = KEYS
-- The values of keys_in (MGET), read ahead for the states with keys of their own; false: none.
local stored = false
if ARGV[1] == '3' then
  keys_in = {}
  local k = tonumber(ARGV[4])
  for i = 1, k do keys_in[i] = ARGV[4 + i] end
  arg = 5 + k
elseif #KEYS > 0 then
  -- One MGET instead of a GET per key: a hash key (packed states) reads as nil and is ignored.
  -- Not for a cluster node's batch, whose keys span slots, which one command may not.
  stored = mget(KEYS)
end

-- The kinds of item: {alg, n, w, cap, cost, count_denied, counts (not shadow), in a hash field}.
local kinds = {}
for i = 1, tonumber(ARGV[arg]) do
  local alg, n, w, cap, cost, flags = unpack('<dddddd', ARGV[arg + i])
  kinds[i] = {alg, n, w, cap, cost, alg == 2 and flags % 2 == 1, flags % 4 < 2, flags % 8 >= 4}
end
arg = arg + #kinds + 1
-- The plan's bytes as numbers (string.byte returns them all at once, a few thousand at most).
local plan, text = {}, ARGV[arg]
for first = 1, #text, 4000 do
  local part = {string.byte(text, first, first + 3999)}
  for j = 1, #part do plan[first + j - 1] = part[j] end
end
local next_field = arg + 1  -- the argument holding the next packed state's field
local at_plan = 1
-- The plan's next count: a byte, or 255 then three bytes (little-endian). (The loop below reads
-- a count's byte itself and calls this only for the escape: a call per count would cost more
-- than the reading.)
local function plan_count()
  local c = plan[at_plan]
  if c == 255 then
    c = plan[at_plan + 1] + plan[at_plan + 2] * 256 + plan[at_plan + 3] * 65536
    at_plan = at_plan + 4
  else
    at_plan = at_plan + 1
  end
  return c
end

-- A new state's decision for an item of kind p, and the state it leaves: at one instant the same
-- for every new state of that kind, so it is worked out once a call and kept in p[9]. It is a
-- record (fields 1-7 as above; 8: itself; 9, 10: the value and expiry its first write works out;
-- 11-15: the decision) that every such state shares until another item uses it, which then
-- gets a record of its own (one table fewer per new key).
local function decide_new(p)
  local st = {0, 0, 0}
  local ok, remaining, retry, reset, delay = decide(p[1], st, now, p[2], p[3], p[4], p[5], p[6])
  local changed = p[5] > 0 and (ok or p[6])
  local memo = {st[1], st[2], st[3], false, 0, p[1], changed, false, false, false, ok, remaining,
                retry, reset, delay}
  memo[8] = memo
  p[9] = memo
  return memo
end

local replied = 1  -- the reply's length
for _ = 1, tonumber(ARGV[3]) do
  local m = plan[at_plan]
  if m < 255 then at_plan = at_plan + 1 else m = plan_count() end
  -- For a request of several items, whether it is allowed and, for the undo: record, kind, saved
  -- state, where its reply is. A request of one item needs neither: its item's reply says it,
  -- and an item that denies has not changed its state.
  local allowed, items = true, m > 1 and {}
  for i = 1, m do
    local p = plan[at_plan]
    if p < 255 then at_plan = at_plan + 1 else p = plan_count() end
    local s = plan[at_plan]
    if s < 255 then at_plan = at_plan + 1 else s = plan_count() end
    p = kinds[p]
    local alg, cost = p[1], p[5]
    local st = records[s]
    local new = false  -- a new state's decision (see decide_new), for the only item of a request
    if not st then  -- the state's first item (states are numbered in the order first used)
      local raw
      if p[8] then
        fields[s] = ARGV[next_field]
        next_field = next_field + 1
        raw = call('HGET', keys_in[s], fields[s])
      elseif stored then
        raw = stored[s]
      else
        raw = call('GET', keys_in[s])
      end
      if not raw and m == 1 and alg ~= 3 then
        new = p[9] or decide_new(p)
        st = new
      elseif not raw then
        st = {0, 0, 0, false, 0, alg, false}
        if alg == 3 then st.log = {} end
      elseif alg == 3 then
        st = {0, 0, 0, raw, 0, alg, false}
        parse_into(st, alg, raw)
        st[5] = st[1]
      elseif #raw >= 24 then
        local idle, x, y = unpack('<ddd', raw)
        st = {idle, x, y, raw, idle, alg, false}
      else
        local idle, x = unpack('<dd', raw)
        st = {idle, x, 0, raw, idle, alg, false}
      end
      records[s] = st
    elseif st[8] == st then  -- a new state as decide_new left it: now a record of its own
      st = {st[1], st[2], st[3], false, 0, st[6], st[7]}
      records[s] = st
    end
    local saved = items and copy(st)
    local ok, remaining, retry, reset, delay
    if new then
      ok, remaining, retry, reset, delay = new[11], new[12], new[13], new[14], new[15]
    elseif alg == 4 then  -- decide(), written out
      ok, remaining, retry, reset, delay = sliding_window(st, now, p[2], p[3], cost)
    elseif alg == 2 then
      ok, remaining, retry, reset, delay = fixed(st, now, p[2], p[3], cost, p[6])
    elseif alg == 3 then
      ok, remaining, retry, reset, delay = sliding_log(st, now, p[2], p[3], cost)
    else
      ok, remaining, retry, reset, delay = bucket(st, now, p[2], p[3], p[4], cost, alg == 1)
    end
    local at = replied + 1
    if not ok then
      reply[at], reply[at + 1], reply[at + 2] = -1 - remaining, reset, retry
      replied = replied + 3
      if p[7] then allowed = false end
      if p[6] and cost > 0 then st[7] = true end  -- count_denied
    else
      if alg == 1 then
        reply[at], reply[at + 1], reply[at + 2] = remaining, reset, delay
        replied = replied + 3
      else
        reply[at], reply[at + 1] = remaining, reset
        replied = replied + 2
      end
      if cost > 0 then st[7] = true end  -- an item changes its state only when it consumes
    end
    if saved then items[i] = {st, p, saved, at} end
  end
  if not allowed and items then
    -- Undo, newest first, all but count_denied items; report what is left with nothing consumed.
    for i = m, 1, -1 do
      local it = items[i]
      if not it[2][6] and not same(it[1], it[3]) then
        restore(it[1], it[3])
        local p, at = it[2], it[4]
        local _, remaining, _, reset = decide(p[1], copy(it[3]), now, p[2], p[3], p[4], 0, false)
        -- Its own reply keeps whether it was allowed (the sign) and its retry; no delay.
        if reply[at] < 0 then
          reply[at] = -1 - remaining
        else
          reply[at] = remaining
          if p[1] == 1 then reply[at + 2] = 0 end
        end
        reply[at + 1] = reset
      end
    end
  end
end

-- Write what changed: a state back to initial is deleted, any other is set with an expiry no
-- earlier than its idle_at (see the header).
if commit then
  local hash_expiry, new_fields = {}, {}  -- by hash: the expiry it needs (ms); true
  for i = 1, #records do
    local st = records[i]
    local alg = st[6]
    -- Only a state an item changed (sliding_log: whose log may have been trimmed).
    if st[7] or alg == 3 then
      local raw, key, field = st[4], keys_in[i], fields[i]
      if field then
        local value = encode(alg, st, field)
        if value ~= raw then
          if st[1] <= now then
            if raw then call('HDEL', key, field) end
          else
            call('HSET', key, field, value)
            -- The hash already outlives the idle_at it held (its expiry only ever moves on).
            local idle_ms = ceildiv(st[1], 1000)
            if not raw or idle_ms > ceildiv(st[5], 1000) then
              hash_expiry[key] = max(hash_expiry[key] or 0, idle_ms)
            end
            if not raw then new_fields[key] = true end
          end
        end
      elseif st[1] <= now or (alg == 3 and #st.log == 0) then
        if raw then call('DEL', key) end  -- back to initial, as a missing key is
      else
        -- A new state as decide_new left it (no other item used it since): its value and expiry
        -- are those of every such state of its kind, worked out by the first one's write.
        local new = st[8]
        if new and new[9] then
          call('PSETEX', key, new[10], new[9])
        else
          -- The key's expiry still covers the state when its idle_at stayed (the windows), or when
          -- the expiry kept in the value does (the others): then the expiry is kept.
          local window = alg == 2 or alg == 4
          local keep, at = false, 0
          if not raw then
            keep = false
          elseif window then
            keep = st[1] <= st[5]
          else
            keep = st[expiry_slot[alg]] * 1000 >= st[1]
          end
          if not keep then
            at = expiry(alg, st[1], now)
            if not window then st[expiry_slot[alg]] = at end
          end
          local value
          if alg == 4 or alg < 2 then
            value = pack('<ddd', st[1], st[2], st[3])
          else
            value = encode(alg, st, false)
          end
          if not keep then
            -- PSETEX (relative) costs Redis less than SET PXAT; Redis's clock has not gone back
            -- since TIME, so the key lives at least until `at`.
            local text = decimal(at - now_ms)
            if new then new[9], new[10] = value, text end
            call('PSETEX', key, text, value)
          elseif value ~= raw then
            call('SET', key, value, 'KEEPTTL')
          end
        end
      end
    end
  end
  -- A hash's expiry moves on in steps of at least a second (and 1/8 of the remaining life): a
  -- hash of short-lived states would otherwise need a new one on nearly every write.
  for key, at in pairs(hash_expiry) do
    if call('PEXPIRETIME', key) < at then  -- -1: none yet
      call('PEXPIREAT', key, decimal(at + max(1000, floor((at - floor(now / 1000)) / 8))))
    end
  end
  -- One new field in three sweeps (which ones varies with the time): 3 looks per new field.
  local turn = now
  for key in pairs(new_fields) do
    if turn % 3 == 0 then sweep(key, now) end
    turn = turn + 1
  end
end
return reply
