-- GCRA token bucket. KEYS[1]: the theoretical arrival time (TAT), a string "U R" meaning
-- U units + R/scale units (0 <= R < scale). Absent: a full bucket.
-- ARGV: n, now (units; '' = Redis TIME in microseconds), min_ttl_ms, units_per_ms,
--       interval (ticks of 1/scale unit between tokens), capacity (burst x interval), scale.
-- Reply: {allowed, remaining, retry_after (units, -1 = none), reset_after (units), exceeds}.
-- Integers only, all below 2^53 (checked by the client); a denial writes nothing.
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
local interval, capacity, scale = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

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
  if n > 0 then
    local ms = cdiv(cdiv(new_diff, scale), upm)
    if ms < min_ttl then ms = min_ttl end
    redis.call('SET', KEYS[1],
      string.format('%d %d', now + idiv(new_diff, scale), math.fmod(new_diff, scale)),
      'PX', string.format('%d', ms))
  end
  return {1, tokens(capacity - new_diff), -1, cdiv(new_diff, scale), 0}
end
local remaining = 0
if n ~= 1 then remaining = tokens(capacity - diff) end
return {0, remaining, cdiv(new_diff - capacity, scale), cdiv(diff, scale), 0}
