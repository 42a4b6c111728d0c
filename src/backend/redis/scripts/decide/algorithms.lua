--- Part of decide.lua: the algorithms on one state, each a transcription of src/algo: a
--- decision's, a refund's, a lease's and a merge's. Pure: no Redis call.
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

local function fixed(st, now, n, w, cost)
  local ends, count
  if now >= st[1] then
    ends = window_end(now, w)
    count = 0
  else
    ends = st[1]
    count = st[2]
  end
  local allowed = cost <= n and count + cost <= n
  if allowed and cost > 0 then
    count = count + cost
    st[1] = ends
    st[2] = count
  end
  local remaining = (count < n) and (n - count) or 0
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
    if start > current then
      -- A recorded overdraft carried into later windows, stored as the last one it reaches
      -- (see record): denied until then; a cost that fits is admitted when it would be there.
      local retry = -1
      if cost <= n then
        local _, _, then_retry = sliding_window(st, start, n, w, cost)
        retry = start - now + then_retry
      end
      return false, 0, retry, st[1] - now, 0
    end
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
  if st[1] ~= window_end(at, w) then return false end  -- the window rolled
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

-- --- recorded overdrafts (count_denied; algo::RecordOverdraft, algo::RecordSlidingLog): `cost`
-- recorded at `now` after a decision denied it, whatever the limit says. Capped where doubles
-- stop being exact (max_recorded = 2^53 - 1): a bucket's debt, a count, a log's sum; a sliding
-- window's count at N * (1 + 2^52 / W) (carried at most 2^52 µs): what passes N there is
-- carried into the next windows, N a window, stored as the last window it reaches
-- (m = ceil(x / N) - 1 windows on) with what is left there and N as its previous count.
local max_recorded = 9007199254740991

local function max_window_count(alg, n, w)
  if alg ~= 4 then return max_recorded end  -- nothing carried
  if n == 0 then return 0 end
  local two52 = 4503599627370496
  local most = n * (1 + (two52 - two52 % w) / w)
  return (most < max_recorded) and most or max_recorded
end

-- A bucket's debt (its TAT past now, in 1/N µs) grows by cost * W from now on; `cap`, when
-- given, caps what it grows to, never below the debt it had (algo ChargeBucket). N > 0.
local function charge_bucket(st, now, n, w, cost, cap)
  local debt = 0
  local idle, frac = st[1], st[2]
  if now < idle then
    if frac ~= 0 then idle = idle - 1 end
    debt = (idle - now) * n + frac
    if debt < 0 then debt = 0 end
  end
  local grown = debt + cost * w
  if cap and grown > cap then grown = max(debt, cap) end
  local rest = grown % n
  st[1] = now + (grown - rest) / n + ((rest ~= 0) and 1 or 0)
  st[2] = rest
end

local function record(alg, st, now, n, w, cost)
  if alg == 0 or alg == 1 then
    if n == 0 then return end
    charge_bucket(st, now, n, w, cost, max_recorded)
  elseif alg == 2 then
    -- upstream's counter: the count passes N, and ends with its window
    if now >= st[1] then st[1], st[2] = window_end(now, w), 0 end
    if st[2] < max_recorded then st[2] = st[2] + min(cost, max_recorded - st[2]) end
  elseif alg == 4 then
    if n == 0 then return end
    local current = now - now % w
    local prev, cur = 0, 0
    if now < st[1] then
      prev, cur = st[2], st[3]
      local start = ((cur > 0) and (st[1] - w) or st[1]) - w
      if start > current then
        prev, cur = n, cur + (start - current) / w * n
      elseif current >= start + 2 * w then
        prev, cur = 0, 0
      elseif current == start + w then
        prev, cur = cur, 0
      end
    end
    local most = max_window_count(alg, n, w)
    if cur >= most then return end
    cur = cur + min(cost, most - cur)
    if cur <= n then
      st[1] = current + 2 * w
      st[2], st[3] = prev, cur
    else
      local m = ceildiv(cur, n) - 1
      st[1] = current + (m + 2) * w
      st[2], st[3] = n, cur - m * n
    end
  else
    -- sliding_log (its log already trimmed by the decision): while over the limit the newest
    -- entry takes the cost and moves to now, so a log keeps at most N + 1 entries.
    local log = st.log
    local sum = 0
    for i = 2, #log, 2 do sum = sum + log[i] end
    if sum >= max_recorded then return end
    cost = min(cost, max_recorded - sum)
    local last = #log - 1
    if #log > 0 and log[last] > now then now = log[last] end
    if #log > 0 and (log[last] == now or sum > n) then
      log[last] = now
      log[last + 1] = log[last + 1] + cost
    else
      log[#log + 1] = now
      log[#log + 1] = cost
    end
    st[1] = now + w
  end
end

local function decide_plain(alg, st, now, n, w, cap, cost)
  if alg == 0 then return bucket(st, now, n, w, cap, cost, false) end
  if alg == 1 then return bucket(st, now, n, w, cap, cost, true) end
  if alg == 2 then return fixed(st, now, n, w, cost) end
  if alg == 4 then return sliding_window(st, now, n, w, cost) end
  return sliding_log(st, now, n, w, cost)
end

-- A decision; with count_denied, a denied cost > 0 is recorded, and the answer is what the same
-- request would be told then (algo::DecideCompactCountingDenied).
local function decide(alg, st, now, n, w, cap, cost, count_denied)
  local ok, remaining, retry, reset, delay = decide_plain(alg, st, now, n, w, cap, cost)
  if ok or not count_denied or cost == 0 then return ok, remaining, retry, reset, delay end
  record(alg, st, now, n, w, cost)
  return decide_plain(alg, st, now, n, w, cap, cost)
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
    charge_bucket(st, now, n, w, cost)
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

