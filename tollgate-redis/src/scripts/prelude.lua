-- Shared by the four scripts, sent before each one's body. ARGV[1] = n (the cost),
-- ARGV[2] = now in the script's unit ('' = Redis TIME, in microseconds; else a test clock's
-- nanoseconds). Replies are one string of space-separated integers (`string.format('%d')`,
-- exact below 2^53): cheaper for the server than an array, whose every element it converts
-- and inspects.
--
-- State is stored as packed doubles (`struct.pack`, 8 bytes per number: every integer below
-- 2^53 exactly), read back in one call with no string matching. Each state records what it
-- was counted in (the token bucket its scale and capacity, the windows their length and slot
-- count), so a call under another quota converts it instead of misreading it.
local fmod = math.fmod
local n, now = tonumber(ARGV[1]), ARGV[2]
-- Units per ms, and the least TTL in ms: on TIME, microseconds and none; under a test clock,
-- nanoseconds and an hour (real time passing between calls never expires what the test
-- clock still counts).
local upm, least = 1000, 0
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now, upm, least = tonumber(now), 1000000, 3600000
end
-- The relative TTL, whole ms as a string, of state that is full again `units` from now.
local function ttl_ms(units)
  local r = fmod(units, upm)
  local ms = (units - r) / upm
  if r > 0 then ms = ms + 1 end
  if ms < least then ms = least end
  if ms < 1 then ms = 1 end
  return string.format('%d', ms)
end
