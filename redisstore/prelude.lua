-- The arguments of a script of one decision (or refund) on KEYS[1].
--
-- ARGV[1] is now in microseconds, or empty to read the server's TIME.
-- ARGV[2] is the cost n: positive to count an allowed request, negative for
-- a Peek, which counts nothing.
-- ARGV[3], when given and not empty, makes the call a refund
-- (core.Refunder): give back the n units counted at most elapsed µs ago,
-- that is at s = now - elapsed or later, by the algorithm's rule (core's
-- refund.go). Elapsed is at most 2^52; a refund decides nothing, never
-- creates a key, and returns 0.
-- ARGV[4] is, for a named policy, since: the time the limiter took its
-- policy (see clock.lua's changedAt), read only to convert a state
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
local now = ARGV[1]
now = now ~= '' and tonumber(now) or servertime()
local n = ARGV[2]
n = n == '1' and 1 or tonumber(n)
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
