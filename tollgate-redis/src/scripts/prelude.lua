-- Shared by the four scripts, sent before each one's body. ARGV[1] = n (the cost),
-- ARGV[2] = now in the script's unit ('' = Redis TIME, in microseconds), ARGV[3] = the least
-- TTL in ms, ARGV[4] = units per millisecond.
-- Exact integer division of non-negative integers below 2^53: fmod is exact on doubles, and
-- dividing an exact multiple is exact.
local function idiv(a, b) return (a - math.fmod(a, b)) / b end
local function cdiv(a, b) local r = math.fmod(a, b); return (a - r) / b + (r > 0 and 1 or 0) end
local n, now = tonumber(ARGV[1]), ARGV[2]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local min_ttl, upm = tonumber(ARGV[3]), tonumber(ARGV[4])
-- The relative TTL, whole ms as a string, of state that is full again `units` from now.
local function ttl_ms(units)
  local ms = cdiv(units, upm)
  if ms < min_ttl then ms = min_ttl end
  if ms < 1 then ms = 1 end
  return string.format('%d', ms)
end
