-- A cap on the requests in flight per key (inflight.go): KEYS[1] is a
-- sorted set of the key's leases, each member a lease ID scored by its
-- expiry in microseconds.
--
-- ARGV[1] is the operation: 'a' to acquire, 'r' to release.
-- ARGV[2] is the lease ID.
-- Acquire only: ARGV[3] the limit, ARGV[4] the lease TTL in µs, ARGV[5]
-- the expiry margin in ms, ARGV[6] now in µs, or empty for the server's
-- TIME.
--
-- Acquire drops the expired leases, and adds this one if fewer than the
-- limit are left, all in one atomic step; the key expires with its last
-- lease (plus the margin), so a key is never written without a TTL and a
-- server that dies leaks nothing past its leases' TTL. It returns
-- {allowed (1 or 0), leases held, µs until the soonest lease expires (0
-- when allowed)}. Release removes the lease (an empty set is deleted by
-- Redis itself) and returns 0.
local key = KEYS[1]
if ARGV[1] == 'r' then
	redis.call('ZREM', key, ARGV[2])
	return 0
end
local limit, ttl, margin = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = ARGV[6]
if now == '' or not now then
	-- Redis 5 and later replicate a script's effects, so reading TIME
	-- before a write is allowed; before 5 it must be asked for.
	if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
		redis.replicate_commands()
	end
	local t = redis.call('TIME')
	now = t[1] * 1000000 + t[2]
else
	now = tonumber(now)
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local n = redis.call('ZCARD', key)
if n >= limit then
	local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
	return {0, n, tonumber(first[2]) - now}
end
local expires = now + ttl
redis.call('ZADD', key, expires, ARGV[2])
-- The key lasts as long as its latest lease, which may be another
-- limiter's of a longer TTL.
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local until_last = math.max(tonumber(last[2]), expires) - now
redis.call('PEXPIRE', key, math.ceil(until_last / 1000) + margin)
return {1, n + 1, 0}
