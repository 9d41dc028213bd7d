-- The arguments of a script of one decision (or refund) on KEYS[1].
--
-- ARGV[1] is now in microseconds, or empty to read the server's TIME.
-- ARGV[2] is the cost n: positive to count an allowed request, negative for
-- a Peek, which counts nothing. A call without either (no ARGV) is the
-- common one, a request of cost 1 on the server's TIME: every argument
-- costs Redis the parsing of a bulk string and a Lua string.
-- ARGV[3], when given and not empty, makes the call a refund
-- (core.Refunder): give back the n units counted at most elapsed µs ago,
-- that is at s = now - elapsed or later, by the algorithm's rule (core's
-- refund.go). Elapsed is at most 2^52; a refund decides nothing, never
-- creates a key, and returns 0.
-- Two values of ARGV[3] below 0 make other calls of one key (they too
-- never come without ARGV, so the common call pays nothing for them):
-- -1 a partial grant (core.PartialLimiter: the n is the most to count;
-- see scripts.go's singleLua), -2 a charge (core.Settler: count n more
-- units at now, unconditionally, up to one capacity of debt past the
-- limit, as core's per-algorithm charge; returns 0, creating the key if
-- it is missing, with an expiry that covers the debt).
-- ARGV[4] is, for a named policy, since: the time the limiter took its
-- policy (see convert.lua's changedAt), read only to convert a state
-- written under another policy. An unnamed policy's calls, whose keys
-- hold no other policy's state, go without it (a calendar policy's pass
-- its periods from ARGV[4] on: calendarwindow.lua).
-- Every other call returns its decision packed as answer says, or, when
-- it is fresh (see clock.lua's answer) and short is true, its resetAfter
-- as an integer reply. A layered script sets short to false: a layer
-- answers in full.
--
-- Decoding a number costs a strtod, so the cost "1" and the empty now are
-- told by comparison (Lua's strings are interned: the same pointer).
local now, n = ARGV[1], ARGV[2]
if now == '' or not now then
	-- The server's TIME, as batch.lua's servertime reads it (inline: a
	-- function costs a closure per call). Redis 5 and later replicate a
	-- script's effects, not the script, so reading TIME before a write is
	-- allowed; before 5 it must be asked for (REDIS_VERSION_NUM exists
	-- since 7).
	if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
		redis.replicate_commands()
	end
	local t = redis.call('TIME')
	now = t[1] * 1000000 + t[2]
else
	now = tonumber(now)
end
n = (n == '1' or not n) and 1 or tonumber(n)
local commit = n > 0
if not commit then
	n = -n
end
local elapsed = ARGV[3] and tonumber(ARGV[3])
local since = ARGV[4]
local short = true
-- arg returns the integer x as a redis.call argument: here x itself, which
-- Redis writes as an integer (see clock.lua); a batch script memoizes the
-- decimal string instead (batchArg).
local arg = tonumber
