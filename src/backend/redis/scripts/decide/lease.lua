--- Part of decide.lua: modes 4 and 6, one lease and a batch of leases.
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
