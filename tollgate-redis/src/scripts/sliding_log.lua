-- Exact sliding log: an admission at s counts while now - s < period.
-- KEYS[1]: one sorted set, one member per admission, scored by its time; the member is
-- struct.pack('>dd', C, w): w its cost, C the total cost admitted on the key up to and
-- including it. Members are unique (C only grows), and in score order C only grows too
-- (entries are recorded in time order, and big-endian doubles of positive integers sort as
-- the integers do, also between members of one score). So the live weight is the newest C
-- minus the C before the oldest live member (its C - w): two reads, no sum kept apart. One
-- key: nothing to lose or evict apart from the log itself.
-- Parameters (see prelude.lua): a = period, b = limit.
-- Reply (see prelude.lua): an admission `remaining reset_after`, else the five words.
-- Invariant: the live members (at - s < period) never weigh more than the limit they were
-- admitted under. One script call is atomic. Integers only, all below 2^53 (checked by the
-- client; C reaches 2^53 only after 2^53 units admitted on one key with no pause of a period).
-- A denial writes nothing and reads O(log size + cost) members: never the whole log.
--
-- The members hold times, not counts of a quota: a call under another period or limit decides
-- by its own period and limit on the members still stored. A weight above a lower limit
-- answers remaining 0, and a retry when enough of it leaves: never an error. Members of
-- another format (an earlier release's "seq:n") are not counted from: the key is denied until
-- its newest member leaves (at most one period), then expires.
local period, limit = pa, pb
local key = KEYS[1]

-- Entries are recorded in time order: the limiter's now is max(now, newest entry).
local top, newest = 0, 0
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[1] then
  newest = tonumber(last[2])
  if #last[1] ~= 16 then
    local wait = newest + period - now
    if wait < 1 then wait = 1 end
    return string.format('%d %d %d %d %d', 0, 0, wait, wait, n > limit and 1 or 0)
  end
  top = struct.unpack('>d', last[1])
end
local at = now
if newest > at then at = newest end
local cutoff = string.format('%d', at - period)
-- base: the C before the oldest live member (all of C when none is live).
local base = top
local first = redis.call('ZRANGEBYSCORE', key, '(' .. cutoff, '+inf', 'LIMIT', 0, 1)
if first[1] then
  local c, w = struct.unpack('>dd', first[1])
  base = c - w
end
local live = top - base
local remaining = limit - live
if remaining < 0 then remaining = 0 end
local reset = 0
if live > 0 and newest + period > now then reset = newest + period - now end

if n > limit then
  return string.format('%d %d %d %d %d', 0, remaining, -1, reset, 1)
end
if live + n <= limit then
  if n == 0 then return string.format('%d %d %d %d %d', 1, remaining, -1, reset, 0) end
  -- ZADD first: a script's first write decides whether a full server (maxmemory) refuses
  -- it, and a trim alone would not be refused. Expired entries (at - s >= period) still
  -- stored are trimmed by an admission whose C crosses a multiple of an eighth of the limit
  -- (every admission when the limit is below 16): at most that many units of members are
  -- added between two trims, so the log holds at most the limit plus an eighth of it in
  -- units beyond its live members, and most admissions skip the trim. The new member scores
  -- above the cutoff.
  redis.call('ZADD', key, at, struct.pack('>dd', top + n, n))
  local step = (limit - fmod(limit, 8)) / 8
  if step < 2 or fmod(top, step) + n >= step then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  end
  -- The key outlives its newest member's period: its expiry moves only when it would fall
  -- short (one ms kept for the server's ms clock), and then an eighth of a period further
  -- than needed, so most admissions only read it.
  local need = at + period - now
  if (redis.call('PTTL', key) - 1) * upm < need then
    redis.call('PEXPIRE', key, ttl_ms(need + (period - fmod(period, 8)) / 8))
  end
  return string.format('%d %d', remaining - n, at + period - now)
end
-- Denied: the live member, oldest first, whose leaving frees enough (live + n - limit). Every
-- member weighs at least 1, so the oldest `need` live members are enough to find it.
local need = live + n - limit
local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. cutoff, '+inf', 'WITHSCORES',
  'LIMIT', 0, string.format('%d', need))
for i = 1, #oldest, 2 do
  if struct.unpack('>d', oldest[i]) - base >= need then
    local retry = tonumber(oldest[i + 1]) + period - now
    if retry < 0 then retry = 0 end
    return string.format('%d %d %d %d %d', 0, remaining, retry, reset, 0)
  end
end
-- Not found (members removed by hand): fail closed, a full period.
return string.format('%d %d %d %d %d', 0, remaining, period, reset, 0)
