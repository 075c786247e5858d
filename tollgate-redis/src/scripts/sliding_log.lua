-- Exact sliding log: an admission at s counts while now - s < period.
-- KEYS[1]: a sorted set, one member "seq:n" per admission of cost n, scored by its time
-- (members are unique: two admissions in one unit never collapse into one).
-- KEYS[2]: a hash, 'sum' = total cost of the members, 'seq' = the last member's number.
-- ARGV: n, now, min_ttl_ms, units_per_ms (see prelude.lua), then period,
--       limit.
-- Reply: {allowed, remaining, retry_after (units, -1 = none), reset_after (units), exceeds}.
-- Invariant: the live members (at - s < period) never weigh more than limit, and sum is the
-- weight of all stored members. One script call is atomic.
-- Integers only, all below 2^53 (checked by the client); a denial writes nothing and reads
-- O(log size + cost) members: never the whole log.
local function weight(member) return tonumber(string.match(member, ':(%d+)$')) or 0 end
local period, limit = tonumber(ARGV[5]), tonumber(ARGV[6])

-- Entries are recorded in time order: the limiter's now is max(now, newest entry).
local newest = 0
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then newest = tonumber(last[2]) end
local at = now
if newest > at then at = newest end
local cutoff = string.format('%d', at - period)
local sum = tonumber(redis.call('HGET', KEYS[2], 'sum') or '0')
-- Expired entries (at - s >= period) still stored: trimmed by the next admission only.
local expired = 0
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
for i = 1, #gone do expired = expired + weight(gone[i]) end
local live = sum - expired
local remaining = limit - live
local reset = 0
if live > 0 and newest + period > now then reset = newest + period - now end

if n > limit then
  return {0, remaining, -1, reset, 1}
end
if live + n <= limit then
  if n == 0 then return {1, remaining, -1, reset, 0} end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff) end
  local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
  redis.call('ZADD', KEYS[1], string.format('%d', at), string.format('%d:%d', seq, n))
  redis.call('HSET', KEYS[2], 'sum', string.format('%d', live + n))
  local ms = ttl_ms(at + period - now)
  redis.call('PEXPIRE', KEYS[1], ms)
  redis.call('PEXPIRE', KEYS[2], ms)
  return {1, remaining - n, -1, at + period - now, 0}
end
-- Denied: the live entry, oldest first, whose leaving frees enough (live + n - limit). Every
-- member weighs at least 1, so the oldest `need` live members are enough to find it.
local need = live + n - limit
local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. cutoff, '+inf', 'WITHSCORES',
  'LIMIT', 0, string.format('%d', need))
for i = 1, #oldest, 2 do
  need = need - weight(oldest[i])
  if need <= 0 then
    local retry = tonumber(oldest[i + 1]) + period - now
    if retry < 0 then retry = 0 end
    return {0, remaining, retry, reset, 0}
  end
end
return redis.error_reply('tollgate: sliding log state is inconsistent')
