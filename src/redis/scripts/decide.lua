#!lua flags=allow-cross-slot-keys
-- (The line above lets a call on a cluster node use keys of several of that node's slots, given
-- in ARGV (mode 3): RedisStore batches the requests headed to one node. Declared KEYS must still
-- share a slot, and a key the node does not serve fails the call before anything is written.)
-- sluice: decide the limits of one or more requests, each all-or-nothing, on Redis.
--
-- A transcription of src/algo/algorithms.cc and MemoryStore::DecideAll (src/store); the two are
-- run on the same vectors by src/redis/scripts_test.cc. The clock is Redis's own TIME: no client
-- clock is ever used, so clock skew between sluice instances cannot matter.
--
-- ARGV[1]: 1 = decide and write, 0 = only evaluate (what would happen; nothing is written),
--          2 = refund (give back what admitted requests consumed: see "Refunds" below),
--          3 = as 1, with the keys in ARGV instead of KEYS (a cluster node's batch: see above)
-- ARGV[2]: R, the number of requests; they are decided in turn, at the same instant, each
--          all-or-nothing on its own (as R calls of DecideAll would be)
-- mode 3 only: ARGV[3] the number of keys K, then the K keys (what KEYS holds otherwise)
-- then per request: its item count M, then one argument per item, 6 little-endian doubles
-- (struct '<dddddd': one unpack instead of six tonumber calls on decimal text), then, for a state
-- kept in a hash (see "Packed states" below), the hash field's name:
--   algorithm, N, W (µs), capacity, cost, flags [, field]
--   algorithm: 0 token_bucket, 1 leaky_bucket, 2 fixed_window, 3 sliding_log, 4 sliding_window
--   capacity:  Limit::Capacity() (the bucket size; N for the others)
--   flags:     1 = count_denied (fixed_window: count even denied requests), 2 = shadow
-- KEYS: the state of each item (its string key, or the hash that holds its field), in the same
-- order (a key may appear more than once).
-- Returns {now_us, then per request: allowed, then per item: allowed, remaining,
-- retry_after_us, reset_after_us, delay_us}; retry_after_us -1 means never.
--
-- Arithmetic: Lua numbers are doubles, exact for integers below 2^53. sluice only sends limits
-- whose products stay below that (redis::CheckExactRange: capacity * W and 2 * N * W), and every
-- division goes through divmod, which corrects the rounding of the floating-point quotient.
--
-- Stored values (one string key per limiter key and limit), little-endian doubles:
--   buckets:        idle_at, frac         idle_at = ceil(TAT), frac = TAT's remainder in 1/N µs
--   fixed_window:   idle_at, count        idle_at = end of the window
--   sliding_window: idle_at, prev, cur
--   sliding_log:    idle_at, then at, cost per entry (oldest first)
-- Every key expires (PXAT) just past idle_at, when its state is back to that of a new key; the
-- buckets and sliding_log, whose idle_at moves on with every admitted request, get 1/8 of their
-- remaining life on top, so that the next requests usually find the expiry good as it is and
-- write with SET KEEPTTL (about half the cost of setting a new expiry). An existing key's expiry
-- is never earlier than its idle_at (PEXPIRETIME checks it when idle_at moved on): Redis >= 7.0.
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

local function divmod(a, b)  -- a >= 0, b > 0: floor(a / b), a mod b, exactly
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
    r = r + b
  elseif r >= b then
    q = q + 1
    r = r - b
  end
  return q, r
end

local function ceildiv(a, b)
  local q, r = divmod(a, b)
  if r > 0 then q = q + 1 end
  return q
end

local function window_start(now, w)
  local _, r = divmod(now, w)
  return now - r
end

-- --- states: {idle, a, b} for the O(1) algorithms; {idle, log = {at1, cost1, at2, ...}}

local function parse(alg, raw)
  if not raw then
    if alg == 3 then return {0, log = {}} end
    return {0, 0, 0}
  end
  if alg == 3 then
    local log = {}
    local idle = unpack('<d', raw)
    for i = 9, #raw - 15, 16 do
      local at, cost = unpack('<dd', raw, i)
      log[#log + 1] = at
      log[#log + 1] = cost
    end
    return {idle, log = log}
  end
  if alg == 4 then
    local idle, a, b = unpack('<ddd', raw)
    return {idle, a, b}
  end
  local idle, a = unpack('<dd', raw)
  return {idle, a, 0}
end

local function encode(alg, st)
  if alg == 3 then
    local parts = {pack('<d', st[1])}
    local log = st.log
    for i = 1, #log, 2 do parts[#parts + 1] = pack('<dd', log[i], log[i + 1]) end
    return table.concat(parts)
  end
  if alg == 4 then return pack('<ddd', st[1], st[2], st[3]) end
  return pack('<dd', st[1], st[2])
end

local function copy(st)
  if st.log then
    local log = {}
    for i = 1, #st.log do log[i] = st.log[i] end
    return {st[1], log = log}
  end
  return {st[1], st[2], st[3]}
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
      local whole, rest = divmod(debt, n)
      st[1] = now + whole + ((rest ~= 0) and 1 or 0)
      st[2] = rest
    end
  elseif cost > cap then
    retry = -1
  else
    retry = ceildiv(debt - (full - need), n)
  end
  return allowed, max(0, cap - ceildiv(debt, w)), retry, ceildiv(debt, n), delay
end

local function fixed(st, now, n, w, cost, count_denied)
  local ends, count
  if now >= st[1] then
    ends = window_start(now, w) + w
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
    remaining = n - min(n, count)
  end
  local retry = 0
  if not allowed then retry = (cost > n) and -1 or (ends - now) end
  return allowed, remaining, retry, ends - now, 0
end

local function sliding_window(st, now, n, w, cost)
  local current = window_start(now, w)
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
  local e = min(max(now - start, 0), w - 1)
  local prev_weight = prev * (w - e)
  local limit_scaled = n * w
  local allowed = cost <= n and prev_weight + (cur + cost) * w <= limit_scaled
  if allowed and cost > 0 then
    cur = cur + cost
    st[1] = start + 2 * w
    st[2] = prev
    st[3] = cur
  end
  local estimate = cur + ceildiv(prev_weight, w)
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

-- Refunds: ARGV[2] the decision's time (µs, Redis's TIME as the decide call returned it), ARGV[3]
-- the item count M, then the items as for a decision (the cost is what to give back). Returns
-- {now_us}.
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
        local value = encode(alg, st)
        if value == raw then  -- nothing to write
        elseif field then call('HSET', key, field, value)  -- idle_at only moved back
        else call('SET', key, value, 'KEEPTTL') end
      end
    end
  end
  return {now}
end
-- by state (its key, or key NUL field): the state, the stored value (false: none), its idle_at as
-- loaded, the algorithm, where it lives
local states, raws, loaded_idle, algs, keys, fields = {}, {}, {}, {}, {}, {}
local reply = {now}
local arg, key_index = 3, 0
local keys_in = KEYS
if ARGV[1] == '3' then
  keys_in = {}
  local k = tonumber(ARGV[3])
  for i = 1, k do keys_in[i] = ARGV[3 + i] end
  arg = 4 + k
end

for _ = 1, tonumber(ARGV[2]) do
  local m = tonumber(ARGV[arg])
  arg = arg + 1
  local allowed_at = #reply + 1
  reply[allowed_at] = 1
  local allowed = true
  local items = {}  -- for the undo: key, alg, n, w, cap, saved state, consumed, count_denied
  for i = 1, m do
    key_index = key_index + 1
    local a = ARGV[arg]
    local alg, n, w, cap, cost, flags = unpack('<dddddd', a)
    local field = item_field(a)
    arg = arg + 1
    local key = keys_in[key_index]
    if field then key = key .. '\0' .. field end
    local st = states[key]
    if not st then
      local raw = load(keys_in[key_index], field)
      st = parse(alg, raw)
      raws[key] = raw
      loaded_idle[key] = st[1]
      states[key] = st
      algs[key] = alg
      keys[key] = keys_in[key_index]
      fields[key] = field
    end
    local count_denied = alg == 2 and flags % 2 == 1
    -- A request of one item needs no undo: an item that denies has not changed its state.
    local saved = m > 1 and copy(st)
    local ok, remaining, retry, reset, delay = decide(alg, st, now, n, w, cap, cost, count_denied)
    if not ok and flags % 4 < 2 then allowed = false end
    local at = #reply + 1
    reply[at], reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] =
        ok and 1 or 0, remaining, retry, reset, delay
    if saved then items[i] = {key, alg, n, w, cap, saved, at, count_denied} end
  end
  if not allowed and m > 1 then
    -- Undo, newest first, all but count_denied items; report what is left with nothing consumed.
    reply[allowed_at] = 0
    for i = m, 1, -1 do
      local it = items[i]
      local key, saved = it[1], it[6]
      if not it[8] and not same(states[key], saved) then
        states[key] = copy(saved)
        local _, remaining, _, reset = decide(it[2], copy(saved), now, it[3], it[4], it[5], 0, false)
        reply[it[7] + 1], reply[it[7] + 3], reply[it[7] + 4] = remaining, reset, 0
      end
    end
  elseif not allowed then
    reply[allowed_at] = 0
  end
end

-- Write what changed: a state back to initial is deleted, any other is set with an expiry no
-- earlier than its idle_at (see the header).
if commit then
  local hash_expiry, new_fields = {}, {}  -- by hash: the expiry it needs (ms); true
  for id, st in pairs(states) do
    local raw, alg, key, field = raws[id], algs[id], keys[id], fields[id]
    local idle = (st.log and #st.log == 0) or st[1] <= now
    if field then
      local value = encode(alg, st)
      if value ~= raw then
        if idle then
          if raw then call('HDEL', key, field) end
        else
          call('HSET', key, field, value)
          -- The hash already outlives the idle_at it held (its expiry only ever moves on).
          if not raw or ceildiv(st[1], 1000) > ceildiv(loaded_idle[id], 1000) then
            hash_expiry[key] = max(hash_expiry[key] or 0, ceildiv(st[1], 1000))
          end
          if not raw then new_fields[key] = true end
        end
      end
    elseif not raw then
      -- A new key: every change moves idle_at past 0.
      if st[1] ~= 0 and not idle then call('SET', key, encode(alg, st), 'PXAT', expiry(alg, st[1], now)) end
    else
      local value = encode(alg, st)  -- encode(parse(raw)) == raw: unchanged states are not written
      if value ~= raw then
        if idle then
          call('DEL', key)
        elseif st[1] <= loaded_idle[key] or call('PEXPIRETIME', key) >= ceildiv(st[1], 1000) then
          call('SET', key, value, 'KEEPTTL')
        else
          call('SET', key, value, 'PXAT', expiry(alg, st[1], now))
        end
      end
    end
  end
  -- A hash's expiry moves on in steps of at least a second (and 1/8 of the remaining life): a
  -- hash of short-lived states would otherwise need a new one on nearly every write.
  for key, at in pairs(hash_expiry) do
    if call('PEXPIRETIME', key) < at then  -- -1: none yet
      call('PEXPIREAT', key, at + max(1000, floor((at - floor(now / 1000)) / 8)))
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
