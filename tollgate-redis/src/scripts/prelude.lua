-- Shared by the four scripts, sent before each one's body. ARGV[1]: six little-endian
-- doubles (every integer below 2^53 exactly), `n, now, a, b, c, lease`: the cost, now in the
-- script's unit (negative = Redis TIME, in microseconds; else a test clock's nanoseconds),
-- the algorithm's three parameters (each script names them) and the lease asked (0 = none).
-- One binary argument, unpacked in one call: a decimal argument costs the server a strtod
-- each, more than the whole unpacking.
--
-- Replies are one string of space-separated integers (`string.format('%d')`, exact below
-- 2^53): cheaper for the server than an array, whose every element it converts and
-- inspects. An admission answers in two words, `remaining reset_after` (the token bucket
-- with a lease a third, the units taken); every other answer in five: `allowed remaining
-- retry_after reset_after exceeds` (retry_after -1 = none).
--
-- State is stored as packed doubles (`struct.pack`, 8 bytes per number), read back in one
-- call with no string matching. Each state records what it was counted in (the token bucket
-- its scale and capacity, the windows their length and slot count), so a call under another
-- quota converts it instead of misreading it. A write that leaves the key's expiry where it
-- is uses KEEPTTL: a relative expiry costs the server more than the rest of the write.
local fmod = math.fmod
local n, now, pa, pb, pc, lease = struct.unpack('<dddddd', ARGV[1])
-- Units per ms, and the least TTL in ms: on TIME, microseconds and none; under a test clock,
-- nanoseconds and an hour of real time from the key's last expiry move (real time passing
-- between calls never expires what the test clock still counts, within a test's hour).
local upm, least = 1000, 0
if now < 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  upm, least = 1000000, 3600000
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
