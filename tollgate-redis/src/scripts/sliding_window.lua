-- Sliding-window counter: the period split into k slots of len units; slot e counts until
-- slot e + k + 1 begins. KEYS[1]: a string, struct.pack of k + 3 doubles: len, the epoch E of
-- the slot being filled, then the counts of slots E, E - 1, ..., E - k. Absent: nothing counted.
-- Parameters (see prelude.lua): a = len, b = limit, c = k.
-- Reply (see prelude.lua): an admission `remaining reset_after`, else the five words.
-- Invariant: the live slots (cur - k ..= cur) never hold more than the limit they were admitted
-- under. Integers only, all below 2^53 (checked by the client); a denial writes nothing. One
-- script call is atomic.
--
-- Another slot length or count's state: the counts of its slots still live (slot e of length
-- l and k' slots counts until (e + k' + 1) x l) count in the current slot of this quota, so
-- they are forgotten within this quota's own period, never later. A total above a lower limit
-- answers remaining 0, and a retry when enough of it leaves: never an error, never a negative.
-- The converted state is written at once (the one write a denial can make).
local len, limit, k = pa, pb, pc

local cur = (now - fmod(now, len)) / len
local stored = redis.call('GET', KEYS[1])
local fmt = string.rep('d', k + 3)
-- The common case first: the client's 8 slots, this quota's state, its head the current slot
-- (so every stored slot is live and the key's expiry is this slot's), and an admission that
-- fits: one sum in locals, one write that keeps the expiry. The general path below answers
-- the same here.
if n > 0 and k == 8 and cur >= k and stored and #stored == 88 then
  local l, e, c0, c1, c2, c3, c4, c5, c6, c7, c8 = struct.unpack(fmt, stored)
  if l == len and e == cur then
    local total = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8
    if total + n <= limit then
      redis.call('SET', KEYS[1], struct.pack(fmt, l, e, c0 + n, c1, c2, c3, c4, c5, c6, c7, c8),
        'KEEPTTL')
      return string.format('%d %d', limit - total - n, (cur + k + 1) * len - now)
    end
  end
end

-- The stored state is this quota's and its head is the current slot: its expiry is this
-- slot's, (cur + k + 1) x len.
local head, counts, same = cur, {}, false
for j = 1, k + 1 do counts[j] = 0 end
if stored then
  local size = #stored / 8
  local v
  if size >= 3 and fmod(#stored, 8) == 0 then v = {struct.unpack(string.rep('d', size), stored)} end
  if v and v[1] == len and size == k + 3 then
    head = v[2]
    for j = 1, k + 1 do counts[j] = v[j + 2] end
    -- A slot before the head's (time went back) counts in the head's slot.
    if cur < head then cur = head end
    same = head == cur
  elseif v then
    local l, e, carried = v[1], v[2], 0
    for j = 3, size do
      if (e - (j - 3) + size - 2) * l > now then carried = carried + v[j] end
    end
    counts[1] = carried
  else
    counts[1] = limit -- unreadable: counted as full for one period, never as empty
  end
  if head == cur and counts[1] > 0 and not (v and v[1] == len and size == k + 3) then
    -- Stored converted, even if this call is denied: later calls count from it, not again
    -- from the old slots (which may outlast this quota's).
    local out = {len, cur, counts[1]}
    for j = 2, k + 1 do out[j + 2] = 0 end
    redis.call('SET', KEYS[1], struct.pack(string.rep('d', k + 3), unpack(out)),
      'PX', ttl_ms((cur + k + 1) * len - now))
  end
end
local first = cur - k
if first < 0 then first = 0 end
-- The count of slot e: stored at index head - e + 1 when head - k <= e <= head.
local total, newest = 0, nil
local window = {}
for e = first, cur do
  local c = 0
  local i = head - e + 1
  if i >= 1 and i <= k + 1 then c = counts[i] end
  window[e - first + 1] = c
  total = total + c
  if c ~= 0 then newest = e end
end
local remaining = limit - total
if remaining < 0 then remaining = 0 end
local reset = 0
if newest then
  reset = (newest + k + 1) * len - now
  if reset < 0 then reset = 0 end
end

if n > limit then
  return string.format('%d %d %d %d %d', 0, remaining, -1, reset, 1)
end
if total + n <= limit then
  if n == 0 then return string.format('%d %d %d %d %d', 1, remaining, -1, reset, 0) end
  local out = {len, cur}
  local shift = cur - head
  for j = 1, k + 1 do
    local i = j - shift
    local c = 0
    if i >= 1 then c = counts[i] end
    out[j + 2] = c
  end
  out[3] = out[3] + n
  local gone = (cur + k + 1) * len - now
  if gone < 0 then gone = 0 end
  local state = struct.pack(fmt, unpack(out))
  if same then
    redis.call('SET', KEYS[1], state, 'KEEPTTL')
  else
    redis.call('SET', KEYS[1], state, 'PX', ttl_ms(gone))
  end
  return string.format('%d %d', remaining - n, gone)
end
-- Denied: the first slot whose leaving frees enough.
local left = total
local pass_at = (cur + 1) * len
for e = first, cur do
  left = left - window[e - first + 1]
  if left < 0 then left = 0 end
  if left + n <= limit then
    pass_at = (e + k + 1) * len
    break
  end
end
local retry = pass_at - now
if retry < 0 then retry = 0 end
return string.format('%d %d %d %d %d', 0, remaining, retry, reset, 0)
