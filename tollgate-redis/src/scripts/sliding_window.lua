-- Sliding-window counter: the period split into k slots of len units; slot e counts until
-- slot e + k + 1 begins. KEYS[1]: a hash, field 'h' = "epoch count" of the slot being filled,
-- field i (0..k) = "epoch count" of a finished slot with epoch % (k + 1) == i.
-- ARGV: n, now, min_ttl_ms, units_per_ms (see prelude.lua), then len, limit,
--       k.
-- Reply: {allowed, remaining, retry_after (units, -1 = none), reset_after (units), exceeds}.
-- Invariant: the live slots (cur - k ..= cur) never hold more than limit. Integers only, all
-- below 2^53 (checked by the client); a denial writes nothing. One script call is atomic.
local len, limit, k = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ring_len = k + 1

local head_epoch, head_count = 0, 0
local ring = {}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local e, c = string.match(fields[i + 1], '^(%d+) (%d+)$')
  if e then
    if fields[i] == 'h' then
      head_epoch, head_count = tonumber(e), tonumber(c)
    else
      ring[tonumber(fields[i])] = {tonumber(e), tonumber(c)}
    end
  end
end
-- A slot before the head's (time went back) counts in the head's slot.
local cur = idiv(now, len)
if cur < head_epoch then cur = head_epoch end
local first = cur - k
if first < 0 then first = 0 end
local counts = {}
local total, newest = 0, nil
for e = first, cur do
  local c = 0
  if e == head_epoch then
    c = head_count
  elseif e < cur then
    local r = ring[math.fmod(e, ring_len)]
    if r and r[1] == e then c = r[2] end
  end
  counts[e - first + 1] = c
  total = total + c
  if c ~= 0 then newest = e end
end
local remaining = limit - total
if remaining < 0 then remaining = 0 end
local function until_gone(e)
  local t = (e + k + 1) * len - now
  if t < 0 then return 0 end
  return t
end
local reset = 0
if newest then reset = until_gone(newest) end

if n > limit then
  return {0, remaining, -1, reset, 1}
end
if total + n <= limit then
  if n == 0 then return {1, remaining, -1, reset, 0} end
  if head_epoch == cur then
    redis.call('HSET', KEYS[1], 'h', string.format('%d %d', cur, head_count + n))
  elseif head_count ~= 0 then
    redis.call('HSET', KEYS[1], 'h', string.format('%d %d', cur, n),
      string.format('%d', math.fmod(head_epoch, ring_len)),
      string.format('%d %d', head_epoch, head_count))
  else
    redis.call('HSET', KEYS[1], 'h', string.format('%d %d', cur, n))
  end
  redis.call('PEXPIRE', KEYS[1], ttl_ms(until_gone(cur)))
  return {1, remaining - n, -1, until_gone(cur), 0}
end
-- Denied: the first slot whose leaving frees enough.
local left = total
local pass_at = (cur + 1) * len
for e = first, cur do
  left = left - counts[e - first + 1]
  if left < 0 then left = 0 end
  if left + n <= limit then
    pass_at = (e + k + 1) * len
    break
  end
end
local retry = pass_at - now
if retry < 0 then retry = 0 end
return {0, remaining, retry, reset, 0}
