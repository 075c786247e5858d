-- GCRA token bucket. KEYS[1]: a string, struct.pack('dddd', U, R, scale, capacity): the
-- theoretical arrival time (TAT) U units + R/scale units (0 <= R < scale), and the scale and
-- capacity (ticks) of the quota it was counted under. Absent: a full bucket.
-- ARGV: n, now, min_ttl_ms, units_per_ms (see prelude.lua), then
--       interval (ticks of 1/scale unit between tokens), capacity (burst x interval), scale,
--       and optionally lease: when n passes, take up to this many (at least n) for the client
--       to spend itself.
-- Reply: {allowed, remaining, retry_after (units, -1 = none), reset_after (units), exceeds},
--        and after an admission with a lease, the units taken.
-- Invariant: after every admission tat <= max(tat, now) + capacity, so any span [t0, t1]
-- admits at most burst + (t1 - t0) x limit / period. Integers only, all below 2^53 (checked by
-- the client); a denial writes nothing. One script call is atomic: no ordering to reason about.
--
-- Another quota's state (other scale or capacity, or the text "U R" of an earlier release):
-- what it still owed, max(tat - now, 0) rounded up to whole units, counts in this quota's
-- ticks, at most a drained bucket of this quota. So a lower or slower quota decides at once
-- from a bucket no fuller than the stored one, and never waits longer than its own drained
-- bucket would (retry_after at most one interval per token asked).
local interval, capacity, scale = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local lease = tonumber(ARGV[8] or '0')

-- diff = max(tat - now, 0) in ticks.
local diff = 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local u, r, s, c
  if #stored == 32 then
    u, r, s, c = struct.unpack('dddd', stored)
  else
    u, r = string.match(stored, '^(%d+) (%d+)$')
    u, r, s = tonumber(u), tonumber(r), -1
  end
  if not r then
    diff = capacity -- unreadable: counted as drained, never as full
  elseif s == scale and c == capacity then
    if u >= now then diff = (u - now) * scale + r end
  elseif u >= now then
    if r > 0 then u = u + 1 end
    diff = (u - now) * scale
    if diff > capacity then diff = capacity end
  end
end

local cost = n * interval
if cost > capacity then
  local left = capacity - diff
  if left < 0 then left = 0 end
  local rs = fmod(diff, scale)
  return {0, (left - fmod(left, interval)) / interval, -1,
    (diff - rs) / scale + (rs > 0 and 1 or 0), 1}
end
local new_diff = diff + cost
if new_diff <= capacity then
  local left = capacity - new_diff
  local taken = n
  if n > 0 and lease > n then
    local extra = (left - fmod(left, interval)) / interval
    if extra > lease - n then extra = lease - n end
    taken = n + extra
    new_diff = new_diff + extra * interval
    left = capacity - new_diff
  end
  local rs = fmod(new_diff, scale)
  local full = (new_diff - rs) / scale + (rs > 0 and 1 or 0)
  if n > 0 then
    redis.call('SET', KEYS[1], struct.pack('dddd', now + (new_diff - rs) / scale, rs, scale,
      capacity), 'PX', ttl_ms(full))
  end
  return {1, (left - fmod(left, interval)) / interval, -1, full, 0, taken}
end
local remaining = 0
if n ~= 1 then
  local left = capacity - diff
  if left > 0 then remaining = (left - fmod(left, interval)) / interval end
end
local over = new_diff - capacity
local ro, rd = fmod(over, scale), fmod(diff, scale)
return {0, remaining, (over - ro) / scale + (ro > 0 and 1 or 0),
  (diff - rd) / scale + (rd > 0 and 1 or 0), 0}
