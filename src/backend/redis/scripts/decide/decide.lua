--- Part of decide.lua: modes 0, 1 and 3, the decisions of a batch of requests, each
--- all-or-nothing, and the write of what changed. Last: its `return reply` ends the script.
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
  local alg, n, w, cap, cost, flags = parse_kind(ARGV[arg + i], now)
  if not w then return redis.error_reply(calendar_skew) end
  kinds[i] = {alg, n, w, cap, cost, flags % 2 == 1, flags % 4 < 2, flags % 8 >= 4}
  kinds[i].pen = parse_penalty(ARGV[arg + i], flags)
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
local pstates = {}  -- penalty states read so far, by key (several requests may share one)
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
      if not raw and m == 1 and alg ~= 3 and not p.pen then
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
    local pen, ps, pkey = p.pen, nil, nil
    if pen then
      pkey = penalty_key(keys_in[s], fields[s])
      ps = pstates[pkey]
      if not ps then
        local raw = call('GET', pkey)
        ps = raw and {unpack('<ddddd', raw)} or {0, 0, 0, 0, 0}
        pstates[pkey] = ps
      end
    end
    local blocked = ps and ps[5] > now and (ps[5] - now)
    local saved = items and copy(st)
    local ok, remaining, retry, reset, delay
    if blocked then  -- denied by the penalty, the limit only looked at
      local _, _, _, limit_reset = decide(alg, copy(st), now, p[2], p[3], p[4], 0, false)
      ok, remaining, retry, reset, delay = false, 0, -2 - blocked, max(limit_reset, blocked), 0
    elseif new then
      ok, remaining, retry, reset, delay = new[11], new[12], new[13], new[14], new[15]
    elseif alg == 4 then  -- decide(), written out
      ok, remaining, retry, reset, delay = sliding_window(st, now, p[2], p[3], cost)
    elseif alg == 2 then
      ok, remaining, retry, reset, delay = fixed(st, now, p[2], p[3], cost)
    elseif alg == 3 then
      ok, remaining, retry, reset, delay = sliding_log(st, now, p[2], p[3], cost)
    else
      ok, remaining, retry, reset, delay = bucket(st, now, p[2], p[3], p[4], cost, alg == 1)
    end
    if not ok and p[6] and cost > 0 and not new and not blocked then  -- count_denied: record it
      record(alg, st, now, p[2], p[3], cost)
      ok, remaining, retry, reset, delay = decide_plain(alg, st, now, p[2], p[3], p[4], cost)
    end
    if pen and not ok and not blocked and cost > 0 and commit then  -- a denial towards an offence
      local block = record_denial(ps, pen, now)
      if block > 0 then remaining, retry, reset = 0, -2 - block, max(reset, block) end
      local idle = max(ps[5], ps[4] + pen[6], ps[1] + pen[2])
      call('SET', pkey, pack('<ddddd', ps[1], ps[2], ps[3], ps[4], ps[5]), 'PXAT',
           decimal(ceildiv(idle, 1000)))
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
    -- (Whether this item consumed: only then is it undone. A later item of the same state may
    -- have changed the state since, a count_denied one for good.)
    if saved then items[i] = {st, p, saved, at, ok and cost > 0} end
  end
  if not allowed and items then
    -- Undo, newest first, all but count_denied items; report what is left with nothing consumed.
    for i = m, 1, -1 do
      local it = items[i]
      if not it[2][6] and it[5] then
        local st, p, at = it[1], it[2], it[4]
        local look
        if p[1] == 3 then
          -- A log gives back its newest entry's `cost` (as MemoryStore::UndoOne): what a later
          -- count_denied item of the request recorded there stays.
          local log = st.log
          log[#log] = log[#log] - p[5]
          if log[#log] == 0 then
            log[#log] = nil
            log[#log] = nil
          end
          st[1] = (#log > 0) and (log[#log - 1] + p[3]) or it[3][1]
          look = copy(st)
        else
          restore(st, it[3])
          look = copy(it[3])
        end
        local _, remaining, _, reset = decide(p[1], look, now, p[2], p[3], p[4], 0, false)
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
