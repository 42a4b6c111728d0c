--- Part of decide.lua: mode 5, merges (and fences).
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

