-- GCRA token bucket. KEYS[1]: the theoretical arrival time (TAT), a string "U R" meaning
-- U units + R/scale units (0 <= R < scale). Absent: a full bucket.
-- ARGV: n, now, min_ttl_ms, units_per_ms (see prelude.lua), then
--       interval (ticks of 1/scale unit between tokens), capacity (burst x interval), scale,
--       and optionally lease: when n passes, take up to this many (at least n) for the client
--       to spend itself.
-- Reply: {allowed, remaining, retry_after (units, -1 = none), reset_after (units), exceeds},
--        and after an admission with a lease, the units taken.
-- Invariant: after every admission tat <= max(tat, now) + capacity, so any span [t0, t1]
-- admits at most burst + (t1 - t0) x limit / period. Integers only, all below 2^53 (checked by
-- the client); a denial writes nothing. One script call is atomic: no ordering to reason about.
local interval, capacity, scale = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local lease = tonumber(ARGV[8] or '0')

-- diff = max(tat - now, 0) in ticks: bounded by the capacity, never an absolute tick count.
local diff = 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local u, r = string.match(stored, '^(%d+) (%d+)$')
  u, r = tonumber(u), tonumber(r)
  if u and u >= now then diff = (u - now) * scale + r end
end
local function tokens(ticks) if ticks <= 0 then return 0 end return idiv(ticks, interval) end

local cost = n * interval
if cost > capacity then
  return {0, tokens(capacity - diff), -1, cdiv(diff, scale), 1}
end
local new_diff = diff + cost
if new_diff <= capacity then
  local taken = n
  if n > 0 and lease > n then
    local extra = tokens(capacity - new_diff)
    if extra > lease - n then extra = lease - n end
    taken = n + extra
    new_diff = new_diff + extra * interval
  end
  if n > 0 then
    redis.call('SET', KEYS[1],
      string.format('%d %d', now + idiv(new_diff, scale), math.fmod(new_diff, scale)),
      'PX', ttl_ms(cdiv(new_diff, scale)))
  end
  return {1, tokens(capacity - new_diff), -1, cdiv(new_diff, scale), 0, taken}
end
local remaining = 0
if n ~= 1 then remaining = tokens(capacity - diff) end
return {0, remaining, cdiv(new_diff - capacity, scale), cdiv(diff, scale), 0}
