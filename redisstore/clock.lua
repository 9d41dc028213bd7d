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

-- The last new state the fixed and sliding windows' fast parts packed,
-- with the window index, cost, Window and format it was packed of: in a
-- script, none at each call; in a library (functions.go), kept from call
-- to call, so that the new keys of one window pack their state once.
local fwi, fwn, fww, fwf, fws
local swi, swn, sww, swf, sws
