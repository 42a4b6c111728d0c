--- Part of decide.lua: mode 2, refunds.
-- Refunds: ARGV[2] the decision's time (µs, Redis's TIME as the decide call returned it), ARGV[3]
-- the item count M, then per item its kind (six doubles, as for a decision) followed by its hash
-- field if any (the cost is what to give back). Returns {now_us}.
if ARGV[1] == '2' then
  local at = tonumber(ARGV[2])
  for i = 1, tonumber(ARGV[3]) do
    local key = KEYS[i]
    local alg, n, w, _, cost = parse_kind(ARGV[3 + i], at)
    local field = item_field(ARGV[3 + i])
    local raw = load(key, field)
    if raw and cost > 0 and w then  -- (no w: a calendar window long over, nothing to give)
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
