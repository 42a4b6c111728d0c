--- Part of decide.lua: loading and storing states (GET, MGET, the sweep of packed states), the
--- call's instant (Redis's TIME) and fences; what the modes below share.
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

