-- sluice: decide every limit of one request, all-or-nothing, on Redis.
--
-- A transcription of src/algo/algorithms.cc and MemoryStore::DecideAll (src/store); the two are
-- run on the same vectors by src/redis/scripts_test.cc. The clock is Redis's own TIME: no client
-- clock is ever used, so clock skew between sluice instances cannot matter.
--
-- KEYS[i]: the state of item i (the same key may appear twice: decided in turn).
-- ARGV[1]: 1 = decide and write, 0 = only evaluate (what would happen; nothing is written)
-- ARGV[2..]: 6 numbers per item: algorithm, N, W (µs), capacity, cost, flags
--   algorithm: 0 token_bucket, 1 leaky_bucket, 2 fixed_window, 3 sliding_log, 4 sliding_window
--   capacity:  Limit::Capacity() (the bucket size; N for the others)
--   flags:     1 = count_denied (fixed_window: count even denied requests), 2 = shadow
-- Returns {now_us, allowed, then per item: allowed, remaining, retry_after_us, reset_after_us,
-- delay_us}; retry_after_us -1 means never.
--
-- Arithmetic: Lua numbers are doubles, exact for integers below 2^53. sluice only sends limits
-- whose products stay below that (redis::CheckExactRange: capacity * W and 2 * N * W), and every
-- division goes through divmod, which corrects the rounding of the floating-point quotient.
--
-- Stored values (strings, one key per limiter key and limit):
--   buckets:        "idle_at:frac"        idle_at = ceil(TAT), frac = TAT's remainder in 1/N µs
--   fixed_window:   "idle_at:count"       idle_at = end of the window
--   sliding_window: "idle_at:prev:cur"
--   sliding_log:    "idle_at:at,cost:at,cost:..." (oldest first)
-- Every key expires (PXAT) just past idle_at, when its state is back to that of a new key.

local function divmod(a, b)  -- a >= 0, b > 0: floor(a / b), a mod b, exactly
  local q = math.floor(a / b)
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

-- --- states: parse, copy, encode

local function parse(alg, raw)
  local st = {idle = 0, a = 0, b = 0, log = {}}
  if not raw then return st end
  local fields = {}
  for f in string.gmatch(raw, '[^:]+') do fields[#fields + 1] = f end
  st.idle = tonumber(fields[1])
  if alg == 3 then
    for i = 2, #fields do
      local at, cost = string.match(fields[i], '^(%d+),(%d+)$')
      st.log[#st.log + 1] = {tonumber(at), tonumber(cost)}
    end
  else
    st.a = tonumber(fields[2])
    if alg == 4 then st.b = tonumber(fields[3]) end
  end
  return st
end

local function copy(st)
  local log = {}
  for i = 1, #st.log do log[i] = {st.log[i][1], st.log[i][2]} end
  return {idle = st.idle, a = st.a, b = st.b, log = log}
end

local function num(x) return string.format('%.0f', x) end

local function encode(alg, st)
  if alg == 3 then
    local parts = {num(st.idle)}
    for i = 1, #st.log do parts[#parts + 1] = num(st.log[i][1]) .. ',' .. num(st.log[i][2]) end
    return table.concat(parts, ':')
  elseif alg == 4 then
    return num(st.idle) .. ':' .. num(st.a) .. ':' .. num(st.b)
  end
  return num(st.idle) .. ':' .. num(st.a)
end

local function same(x, y)
  if x.idle ~= y.idle or x.a ~= y.a or x.b ~= y.b or #x.log ~= #y.log then return false end
  for i = 1, #x.log do
    if x.log[i][1] ~= y.log[i][1] or x.log[i][2] ~= y.log[i][2] then return false end
  end
  return true
end

-- --- the algorithms (see docs/algorithms.md); each returns a decision and updates `st` only
-- when it admits with cost > 0

local function decision() return {allowed = false, remaining = 0, retry = 0, reset = 0, delay = 0} end

local function bucket(st, now, n, w, cap, cost, leaky)
  local d = decision()
  if n == 0 then
    d.allowed = cost == 0
    d.retry = d.allowed and 0 or -1
    return d
  end
  local debt = 0  -- (TAT - now) * N: how far from full, in 1/N µs
  if now < st.idle then
    local tat_floor = st.idle - ((st.a ~= 0) and 1 or 0)
    debt = (tat_floor - now) * n + st.a
    if debt < 0 then debt = 0 end
  end
  local full = cap * w
  local need = cost * w
  d.allowed = cost <= cap and debt + need <= full
  if d.allowed then
    if leaky then d.delay = ceildiv(debt, n) end
    if cost > 0 then
      debt = debt + need
      local whole, frac = divmod(debt, n)
      st.idle = now + whole + ((frac ~= 0) and 1 or 0)
      st.a = frac
    end
  elseif cost > cap then
    d.retry = -1
  else
    d.retry = ceildiv(debt - (full - need), n)
  end
  d.remaining = math.max(0, cap - ceildiv(debt, w))
  d.reset = ceildiv(debt, n)
  return d
end

local function fixed(st, now, n, w, cost, count_denied)
  local d = decision()
  local ends, count
  if now >= st.idle then
    ends = window_start(now, w) + w
    count = 0
  else
    ends = st.idle
    count = st.a
  end
  if count_denied then
    if cost > 0 then
      count = count + cost
      st.idle = ends
      st.a = count
    end
    d.allowed = count <= n
    d.remaining = d.allowed and (n - count) or 0
  else
    d.allowed = cost <= n and count + cost <= n
    if d.allowed and cost > 0 then
      count = count + cost
      st.idle = ends
      st.a = count
    end
    d.remaining = n - math.min(n, count)
  end
  d.reset = ends - now
  if not d.allowed then d.retry = (cost > n) and -1 or (ends - now) end
  return d
end

local function sliding_window(st, now, n, w, cost)
  local d = decision()
  local current = window_start(now, w)
  local start = current
  local prev, cur = 0, 0
  if now < st.idle then
    prev = st.a
    cur = st.b
    start = ((cur > 0) and (st.idle - w) or st.idle) - w
    if current >= start + 2 * w then
      prev, cur, start = 0, 0, current
    elseif current == start + w then
      prev, cur, start = cur, 0, current
    end
  end
  local e = math.min(math.max(now - start, 0), w - 1)
  local prev_weight = prev * (w - e)
  local limit_scaled = n * w
  d.allowed = cost <= n and prev_weight + (cur + cost) * w <= limit_scaled
  if d.allowed and cost > 0 then
    cur = cur + cost
    st.idle = start + 2 * w
    st.a = prev
    st.b = cur
  end
  local estimate = cur + ceildiv(prev_weight, w)
  d.remaining = (estimate >= n) and 0 or (n - estimate)
  if cur > 0 then
    d.reset = start + 2 * w - now
  elseif prev > 0 then
    d.reset = start + w - now
  end
  if not d.allowed then
    if cost > n then
      d.retry = -1
    else
      local excess = prev_weight + (cur + cost) * w - limit_scaled
      local to_end = w - e
      local wait = -1
      if prev > 0 then
        local x = ceildiv(excess, prev)
        if x <= to_end then wait = x end
      end
      if wait < 0 then
        local into_next = 0
        if cur > 0 and cur + cost > n then into_next = ceildiv((cur + cost - n) * w, cur) end
        wait = to_end + into_next
      end
      d.retry = wait
    end
  end
  return d
end

-- sliding_log: evaluate (forgetting entries that stopped counting), then commit when admitted.
local function log_evaluate(st, now, n, w, cost)
  local log = st.log
  if #log > 0 and log[#log][1] > now then now = log[#log][1] end
  local live = {}
  for i = 1, #log do
    if log[i][1] + w > now then live[#live + 1] = log[i] end
  end
  st.log = live
  local sum = 0
  for i = 1, #live do sum = sum + live[i][2] end
  local d = decision()
  d.allowed = cost <= n and sum + cost <= n
  d.remaining = n - math.min(n, sum)
  d.reset = (#live > 0) and (live[#live][1] + w - now) or 0
  if not d.allowed then
    if cost > n then
      d.retry = -1
    else
      local left = sum
      for i = 1, #live do
        left = left - live[i][2]
        if left + cost <= n then
          d.retry = live[i][1] + w - now
          break
        end
      end
    end
  end
  return d, sum
end

local function log_commit(st, now, n, w, cost, sum, d)
  local log = st.log
  if #log > 0 and log[#log][1] > now then now = log[#log][1] end
  if #log > 0 and log[#log][1] == now then
    log[#log][2] = log[#log][2] + cost
  else
    log[#log + 1] = {now, cost}
  end
  sum = sum + cost
  st.idle = now + w
  d.remaining = n - math.min(n, sum)
  d.reset = w
end

local function decide(alg, st, now, n, w, cap, cost, count_denied)
  if alg == 0 then return bucket(st, now, n, w, cap, cost, false) end
  if alg == 1 then return bucket(st, now, n, w, cap, cost, true) end
  if alg == 2 then return fixed(st, now, n, w, cost, count_denied) end
  if alg == 4 then return sliding_window(st, now, n, w, cost) end
  local d, sum = log_evaluate(st, now, n, w, cost)
  if d.allowed and cost > 0 then log_commit(st, now, n, w, cost, sum, d) end
  return d
end

-- --- the request: every item in turn, then undo on a deny, then write what changed

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local states, loaded = {}, {}  -- by key: the working state, the state as read
local items, out = {}, {}
local allowed = true
for i = 1, #KEYS do
  local base = 1 + (i - 1) * 6
  local it = {
    key = KEYS[i], alg = tonumber(ARGV[base + 1]), n = tonumber(ARGV[base + 2]),
    w = tonumber(ARGV[base + 3]), cap = tonumber(ARGV[base + 4]), cost = tonumber(ARGV[base + 5]),
  }
  local flags = tonumber(ARGV[base + 6])
  it.count_denied = flags % 2 == 1 and it.alg == 2
  it.shadow = flags % 4 >= 2
  if not states[it.key] then
    loaded[it.key] = parse(it.alg, redis.call('GET', it.key))
    states[it.key] = copy(loaded[it.key])
  end
  local st = states[it.key]
  it.saved = copy(st)
  local d = decide(it.alg, st, now, it.n, it.w, it.cap, it.cost, it.count_denied)
  it.consumed = not same(st, it.saved)
  if not d.allowed and not it.shadow then allowed = false end
  items[i] = it
  out[i] = d
end

if not allowed then
  -- Undo, newest first, all but count_denied items; report what is left with nothing consumed.
  for i = #items, 1, -1 do
    local it = items[i]
    if it.consumed and not it.count_denied then
      states[it.key] = copy(it.saved)
      local peek = decide(it.alg, copy(it.saved), now, it.n, it.w, it.cap, 0, false)
      out[i].remaining = peek.remaining
      out[i].reset = peek.reset
      out[i].delay = 0
    end
  end
end

local commit = ARGV[1] == '1'
for key, st in pairs(states) do
  if commit and not same(st, loaded[key]) then
    local alg
    for i = 1, #items do
      if items[i].key == key then alg = items[i].alg end
    end
    if (alg == 3 and #st.log == 0) or st.idle <= now then
      redis.call('DEL', key)
    else
      redis.call('SET', key, encode(alg, st), 'PXAT', num(ceildiv(st.idle, 1000)))
    end
  end
end

local reply = {now, allowed and 1 or 0}
for i = 1, #out do
  local d = out[i]
  reply[#reply + 1] = d.allowed and 1 or 0
  reply[#reply + 1] = d.remaining
  reply[#reply + 1] = d.retry
  reply[#reply + 1] = d.reset
  reply[#reply + 1] = d.delay
end
return reply
