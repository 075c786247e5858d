-- Fixed window: windows [k*len, (k+1)*len) from the clock's zero (the Unix epoch on Redis
-- TIME). KEYS[1]: a string "k count" for the window counted last. Absent: nothing counted.
-- ARGV: n, now, min_ttl_ms, units_per_ms (see prelude.lua), then len, limit.
-- Reply: {allowed, remaining, retry_after (units, -1 = none), reset_after (units), exceeds}.
-- Invariant: the count stored for a window never exceeds limit. Integers only, all below 2^53
-- (checked by the client); a denial writes nothing. One script call is atomic.
local len, limit = tonumber(ARGV[5]), tonumber(ARGV[6])

-- A later window starts from zero; an earlier one (time went back) counts against the stored.
local window, count = idiv(now, len), 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local w, c = string.match(stored, '^(%d+) (%d+)$')
  w, c = tonumber(w), tonumber(c)
  if w and w >= window then window, count = w, c end
end
local window_end = (window + 1) * len
local function reset(c)
  if c == 0 or window_end <= now then return 0 end
  return window_end - now
end

if n > limit then
  return {0, limit - count, -1, reset(count), 1}
end
if count + n <= limit then
  if n > 0 then
    redis.call('SET', KEYS[1], string.format('%d %d', window, count + n),
      'PX', ttl_ms(window_end - now))
  end
  return {1, limit - count - n, -1, reset(count + n), 0}
end
local retry = window_end - now
if retry < 0 then retry = 0 end
return {0, limit - count, retry, reset(count), 0}
