-- wrk script: every request carries "X-Key: k<i>" with i in 1..N drawn from zipf(S): rank i has
-- weight i^-S, k1 the most frequent (the same mix as `openloop --keys N --zipf S`). With N =
-- 100,000 and S = 1.0, k1 gets 8.3 % of the requests, the top 100 keys 43 %, the top 10,000 81 %.
--
-- N and S are the script arguments, else env WRK_KEYS and WRK_ZIPF, else 100000 and 1.0:
--   wrk -t4 -c256 -d8s -s zipf.lua http://127.0.0.1:18080/allow -- 100000 1.0
--
-- Requests are rendered once per thread in init() and the draw is Walker's alias method (two
-- random numbers and two table reads, whatever N), so that the per-request Lua cost is that of
-- the anchor's keys.lua (uniform keys) and the two scenarios load wrk alike.

local pool = {}
local prob = {}
local alias = {}
local n = 0

local function build_alias(exponent)
   local weights, total = {}, 0
   for i = 1, n do
      weights[i] = i ^ -exponent
      total = total + weights[i]
   end
   -- Scaled so that the mean is 1; columns below 1 are topped up from one above 1.
   local small, large = {}, {}
   for i = 1, n do
      prob[i] = weights[i] * n / total
      alias[i] = i
      if prob[i] < 1 then small[#small + 1] = i else large[#large + 1] = i end
   end
   while #small > 0 and #large > 0 do
      local s = table.remove(small)
      local l = large[#large]
      alias[s] = l
      prob[l] = prob[l] + prob[s] - 1
      if prob[l] < 1 then
         table.remove(large)
         small[#small + 1] = l
      end
   end
   -- What is left is 1 up to rounding.
   for _, i in ipairs(small) do prob[i] = 1 end
   for _, i in ipairs(large) do prob[i] = 1 end
end

function init(args)
   n = tonumber(args[1] or os.getenv("WRK_KEYS") or "100000")
   local exponent = tonumber(args[2] or os.getenv("WRK_ZIPF") or "1.0")
   if n == nil or n < 1 then
      error("zipf.lua: key count must be a positive integer")
   end
   if exponent == nil or exponent < 0 then
      error("zipf.lua: the exponent must be a number >= 0")
   end
   n = math.floor(n)
   for i = 1, n do
      pool[i] = wrk.format(nil, nil, { ["X-Key"] = "k" .. i })
   end
   build_alias(exponent)
   -- Different seed per thread: time plus this thread's table address (as keys.lua does).
   local addr = tonumber(string.match(tostring(pool), "0x(%x+)") or "0", 16) or 0
   math.randomseed(os.time() + addr % 1000003)
end

function request()
   local i = math.random(n)
   if math.random() >= prob[i] then i = alias[i] end
   return pool[i]
end
