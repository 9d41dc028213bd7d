-- Shared by every script. New writes the policy's constants ahead of it as
-- Lua locals (see scriptSource): margin, the TTL margin in milliseconds,
-- and the algorithm's.
--
-- Numbers are float64, and every value below is an integer under 2^53, so
-- sums, differences and products below 2^53 are exact. So is
-- math.floor(a / b) for integers |a| < 2^53 and b >= 1: the quotient is
-- rounded to the nearest double, off by at most |a/b|·2^-53 < 1/b, which
-- is less than the distance from a/b to the next integer when a/b is not
-- one, and every integer below 2^53 is a double. Likewise math.ceil(a / b).
--
-- Numbers given to redis.call are written by Redis as integers, exactly
-- (%.17g before 7.2, ll2string since), so only the states that join two
-- numbers are formatted here.
--
-- ARGV[1] is now in microseconds, or empty to read the server's TIME.
-- ARGV[2] is the cost n: positive to count an allowed request, negative for
-- a Peek, which counts nothing.
-- ARGV[3], when given, makes the call a refund (core.Refunder): give back
-- the n units counted at most elapsed µs ago, that is at s = now - elapsed
-- or later, by the algorithm's rule (core's refund.go). Elapsed is at most
-- 2^52; a refund decides nothing, never creates a key, and returns 0.
-- Every other call returns {allowed, remaining, retryAfter, resetAfter,
-- delay}, durations in microseconds: remaining and resetAfter describe the
-- state after the request when it is allowed and counted, and the state as
-- it is for a denial or a Peek (core.Decision).
local floor, ceil = math.floor, math.ceil

local now = tonumber(ARGV[1])
if not now then
	-- Redis 5 and later replicate a script's effects, not the script, so
	-- reading TIME before a write is allowed; before 5 it must be asked for.
	-- (REDIS_VERSION_NUM exists since 7.)
	if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
		redis.replicate_commands()
	end
	local t = redis.call('TIME')
	now = t[1] * 1000000 + t[2]
end
local n = tonumber(ARGV[2])
local commit = n > 0
if not commit then
	n = -n
end
local elapsed = ARGV[3] and tonumber(ARGV[3])
