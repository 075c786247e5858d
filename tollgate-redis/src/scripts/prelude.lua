-- Shared by the four scripts, sent before each one's body. ARGV[1] = n (the cost),
-- ARGV[2] = now in the script's unit ('' = Redis TIME, in microseconds), ARGV[3] = the least
-- TTL in ms, ARGV[4] = units per millisecond.
--
-- State is stored as packed doubles (`struct.pack`, 8 bytes per number: every integer below
-- 2^53 exactly), read back in one call with no string matching. Each state records what it
-- was counted in (the token bucket its scale and capacity, the windows their length and slot
-- count), so a call under another quota converts it instead of misreading it.
local fmod = math.fmod
local n, now = tonumber(ARGV[1]), ARGV[2]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
-- The relative TTL, whole ms as a string, of state that is full again `units` from now.
local function ttl_ms(units)
  local upm = tonumber(ARGV[4])
  local r = fmod(units, upm)
  local ms = (units - r) / upm
  if r > 0 then ms = ms + 1 end
  local least = tonumber(ARGV[3])
  if ms < least then ms = least end
  if ms < 1 then ms = 1 end
  return string.format('%d', ms)
end
