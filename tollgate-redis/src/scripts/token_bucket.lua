-- GCRA token bucket. KEYS[1]: a string, struct.pack('dddddd', U, R, interval, scale, capacity,
-- E): the theoretical arrival time (TAT) U units + R/scale units (0 <= R < scale), the
-- interval, scale and capacity (ticks) of the quota it was counted under, and E, a time
-- (units) the key does not expire before (-1: not known; the five-number form of an earlier
-- version has none). Absent: a full bucket.
-- Parameters (see prelude.lua): a = interval (ticks of 1/scale unit between tokens),
--       b = capacity (burst x interval), c = scale; and lease: when n passes, take up to this
--       many (at least n) for the client to spend itself.
-- Reply (see prelude.lua): an admission `remaining reset_after`, with a lease asked
--        `remaining reset_after taken`; else the five words.
-- Invariant: after every admission tat <= max(tat, now) + capacity, so any span [t0, t1]
-- admits at most burst + (t1 - t0) x limit / period. Integers only, all below 2^53 (checked by
-- the client); a denial writes nothing. One script call is atomic: no ordering to reason about.
--
-- Another quota's state (other interval, scale or capacity): the tokens it still owed,
-- ceil(max(tat - now, 0) / its interval), are owed in this quota's intervals, at most a
-- drained bucket of this quota. So the new quota decides at once, admits no token the old
-- state had spent, and never waits longer than its own drained bucket would (retry_after at
-- most one interval per token asked). The text "U R" of an earlier release (no interval
-- known): the time it owed, rounded up to whole units, at most a drained bucket. The
-- converted state is written at once (the one write a denial can make): from then on the
-- key is this quota's.
local interval, capacity, scale = pa, pb, pc

-- diff = max(tat - now, 0) in ticks.
local diff, expiry = 0, -1
local stored = redis.call('GET', KEYS[1])
if stored then
  local u, r, i, s, c
  if #stored == 48 then
    u, r, i, s, c, expiry = struct.unpack('dddddd', stored)
  elseif #stored == 40 then
    u, r, i, s, c = struct.unpack('ddddd', stored)
  else
    u, r = string.match(stored, '^(%d+) (%d+)$')
    u, r, i = tonumber(u), tonumber(r), -1
  end
  if not r then
    diff = capacity -- unreadable: counted as drained, never as full
  elseif i == interval and s == scale and c == capacity then
    if u >= now then diff = (u - now) * scale + r end
  elseif u >= now then
    if i > 0 then
      local owed = (u - now) * s + r
      local rt = fmod(owed, i)
      local tokens = (owed - rt) / i + (rt > 0 and 1 or 0)
      diff = capacity
      if tokens < capacity / interval then diff = tokens * interval end
    else
      if r > 0 then u = u + 1 end
      diff = capacity
      if u - now < capacity / scale then diff = (u - now) * scale end
    end
    -- Stored converted, even if this call is denied: later calls count from it, not again
    -- from the old state (which would owe the same tokens anew and never let one pass).
    local rd = fmod(diff, scale)
    expiry = -1
    redis.call('SET', KEYS[1], struct.pack('dddddd', now + (diff - rd) / scale, rd, interval,
      scale, capacity, expiry), 'PX', ttl_ms((diff - rd) / scale + 1))
  end
end

local cost = n * interval
if cost > capacity then
  local left = capacity - diff
  if left < 0 then left = 0 end
  local rs = fmod(diff, scale)
  return string.format('%d %d %d %d %d', 0, (left - fmod(left, interval)) / interval, -1,
    (diff - rs) / scale + (rs > 0 and 1 or 0), 1)
end
local new_diff = diff + cost
-- A zero cost passes, even on a tat more than the capacity past now (a clock behind the one
-- that wrote it): no tokens left, full when the stored tat is reached.
if new_diff <= capacity or n == 0 then
  local left = capacity - new_diff
  if left < 0 then left = 0 end
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
    -- The key outlives the time its bucket is full again, now + full. Its expiry moves only
    -- when it would not: then to an eighth of a drained bucket later than needed, recorded
    -- as E two ms short of it (the server's ms clock, and the script's own run), so the
    -- admissions that follow keep it (KEEPTTL: moving an expiry is the dearest part of a
    -- write).
    local tat = now + (new_diff - rs) / scale
    if expiry >= now + full then
      redis.call('SET', KEYS[1], struct.pack('dddddd', tat, rs, interval, scale, capacity,
        expiry), 'KEEPTTL')
    else
      local slack = capacity / scale / 8
      slack = slack - fmod(slack, 1)
      redis.call('SET', KEYS[1], struct.pack('dddddd', tat, rs, interval, scale, capacity,
        now + full + slack - 2 * upm), 'PX', ttl_ms(full + slack))
    end
  end
  if lease > 0 then
    return string.format('%d %d %d', (left - fmod(left, interval)) / interval, full, taken)
  end
  return string.format('%d %d', (left - fmod(left, interval)) / interval, full)
end
local remaining = 0
if n ~= 1 then
  local left = capacity - diff
  if left > 0 then remaining = (left - fmod(left, interval)) / interval end
end
local over = new_diff - capacity
local ro, rd = fmod(over, scale), fmod(diff, scale)
return string.format('%d %d %d %d %d', 0, remaining, (over - ro) / scale + (ro > 0 and 1 or 0),
  (diff - rd) / scale + (rd > 0 and 1 or 0), 0)
