-- Fixed window: windows [k*len, (k+1)*len) from the clock's zero (the Unix epoch on Redis
-- TIME). KEYS[1]: a string, struct.pack('ddd', k, count, len): the window counted last, its
-- count, and the length it was counted in. Absent: nothing counted.
-- Parameters (see prelude.lua): a = len, b = limit.
-- Reply (see prelude.lua): an admission `remaining reset_after`, else the five words.
-- Invariant: the count stored for a window never exceeds the limit it was admitted under.
-- Integers only, all below 2^53 (checked by the client); a denial writes nothing. One script
-- call is atomic.
--
-- Another length's state (or the text "k count" of an earlier release): if its window is
-- still open, its count counts in the current window of this length (so it is forgotten at
-- this window's end, never later); a closed one counts nothing. A count above a lower limit
-- answers remaining 0 and waits for the window's end: never an error, never a negative. The
-- converted state is written at once (the one write a denial can make).
local len, limit = pa, pb

-- A later window starts from zero; an earlier one (time went back) counts against the stored.
local window, count = (now - fmod(now, len)) / len, 0
-- The stored state is this quota's and this window's: its expiry is this window's end.
local same = false
local stored = redis.call('GET', KEYS[1])
if stored then
  local w, c, l
  if #stored == 24 then
    w, c, l = struct.unpack('ddd', stored)
  else
    w, c = string.match(stored, '^(%d+) (%d+)$')
    w, c, l = tonumber(w), tonumber(c), -1
  end
  if not c then
    count = limit -- unreadable: counted as full until this window's end, never as empty
  elseif l == len then
    if w >= window then window, count, same = w, c, true end
  elseif l < 0 or (w + 1) * l > now then
    count = c
  end
  if l ~= len and count > 0 then
    -- Stored converted, even if this call is denied: later calls count from it, not again
    -- from the old window (which may outlast this one).
    redis.call('SET', KEYS[1], struct.pack('ddd', window, count, len),
      'PX', ttl_ms((window + 1) * len - now))
  end
end
local window_end = (window + 1) * len
local left = limit - count
if left < 0 then left = 0 end

if n > limit then
  local reset = 0
  if count > 0 and window_end > now then reset = window_end - now end
  return string.format('%d %d %d %d %d', 0, left, -1, reset, 1)
end
if count + n <= limit then
  if n > 0 then
    local state = struct.pack('ddd', window, count + n, len)
    if same then
      redis.call('SET', KEYS[1], state, 'KEEPTTL')
    else
      redis.call('SET', KEYS[1], state, 'PX', ttl_ms(window_end - now))
    end
  end
  local reset = 0
  if count + n > 0 and window_end > now then reset = window_end - now end
  return string.format('%d %d', left - n, reset)
end
local retry = window_end - now
if retry < 0 then retry = 0 end
return string.format('%d %d %d %d %d', 0, left, retry, retry, 0)
