-- The distributed limiter sluice's design started from ("the seed script"): a
-- sliding-window counter on Redis, one script call per request, the caller's
-- clock. sluice bench redis --mode seed runs it beside decide.lua.
--
--   EVALSHA <sha> 1 <key> <limit> <window_s> <now_ms>
--
-- Two counters per key, <key>:<window index> for the current and previous
-- window. The previous one is weighted by how much of it still overlaps the
-- sliding window. The caller passes its own clock (as the seed does); the
-- harness passes a fixed value so redis-benchmark can drive it.
--
-- Returns {allowed, remaining, retry_after_ms}.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local now = tonumber(ARGV[3])
if not limit or not window or not now or window <= 0 then
  return redis.error_reply('usage: EVALSHA sha 1 key limit window_s now_ms')
end

local cur_index = math.floor(now / window)
local cur_key = key .. ':' .. cur_index
local prev_key = key .. ':' .. (cur_index - 1)
local cur = tonumber(redis.call('GET', cur_key) or '0')
local prev = tonumber(redis.call('GET', prev_key) or '0')

local into_window = (now % window) / window
local estimate = prev * (1 - into_window) + cur
if estimate >= limit then
  return { 0, 0, window - (now % window) }
end

redis.call('INCR', cur_key)
redis.call('PEXPIRE', cur_key, window * 2)   -- the next window still needs it
return { 1, math.floor(limit - estimate - 1), 0 }
