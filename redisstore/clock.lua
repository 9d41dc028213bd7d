-- Shared by every script, ahead of its arguments: New writes the policy's
-- constants ahead of it as Lua locals (see scriptSource): margin, the TTL
-- margin in milliseconds, and the algorithm's.
--
-- Numbers are float64, and every value below is an integer under 2^53, so
-- sums, differences and products below 2^53 are exact. So is
-- math.floor(a / b) for integers |a| < 2^53 and b >= 1: the quotient is
-- rounded to the nearest double, off by at most |a/b|·2^-53 < 1/b, which
-- is less than the distance from a/b to the next integer when a/b is not
-- one, and every integer below 2^53 is a double. Likewise math.ceil(a / b).
--
-- Numbers given to redis.call are written by Redis as integers, exactly
-- (%.17g before 7.2, ll2string since); struct.pack writes and
-- struct.unpack reads integers below 2^53 exactly. A state that joins
-- numbers is packed big-endian ('>i8...'), so its first byte is 0 or 255
-- (a value below 2^56 in magnitude), which no decimal string starts with:
-- states stored as text by earlier versions are still read.
local floor, ceil, byte = math.floor, math.ceil, string.byte
local bpack, bunpack = struct.pack, struct.unpack

-- A decision's answer, packed: allowed (1 or 0), remaining, retryAfter,
-- resetAfter, delay, durations in microseconds; remaining and resetAfter
-- describe the state after the request when it is allowed and counted,
-- and the state as it is for a denial or a Peek (core.Decision). decide
-- returns these five numbers and, when a request to count found no key
-- and wrote one (the common case), true: the answer is then fresh, the one
-- every such request for n gets, but for its resetAfter; a script's own
-- reply for it is that resetAfter alone, which the client completes
-- (redisstore.go's decision).
local answer = '>i8i8i8i8i8'

-- newset: SET takes NX and GET together (Redis 7 and later, which alone
-- have REDIS_VERSION_NUM): a write that answers the key's old value.
local newset = redis.REDIS_VERSION_NUM ~= nil

-- servertime returns the server's TIME in microseconds.
local function servertime()
	-- Redis 5 and later replicate a script's effects, not the script, so
	-- reading TIME before a write is allowed; before 5 it must be asked for.
	-- (REDIS_VERSION_NUM exists since 7.)
	if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
		redis.replicate_commands()
	end
	local t = redis.call('TIME')
	return t[1] * 1000000 + t[2]
end

-- changedAt returns the time at which a state written under another
-- policy's parameters (a named policy's key keeps them in its state) is
-- converted to this policy's, as core.Memory.SetPolicy converts every
-- state when it is called: since, the time the limiter took this policy
-- (New or SetPolicy, in µs, a decimal string), but no earlier than lo, the
-- state's last write as far as the state tells (a limiter elsewhere may
-- have written it under the other policy since), and no later than now.
-- It is read only when the parameters differ.
local function changedAt(since, lo, now)
	local c = tonumber(since) or now
	if c < lo then
		c = lo
	end
	if c > now then
		c = now
	end
	return c
end
