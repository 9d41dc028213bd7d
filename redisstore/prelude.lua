-- The arguments of a script of one decision (or refund) on KEYS[1].
--
-- ARGV[1] is now in microseconds, or empty to read the server's TIME.
-- ARGV[2] is the cost n: positive to count an allowed request, negative for
-- a Peek, which counts nothing.
-- ARGV[3], when given, makes the call a refund (core.Refunder): give back
-- the n units counted at most elapsed µs ago, that is at s = now - elapsed
-- or later, by the algorithm's rule (core's refund.go). Elapsed is at most
-- 2^52; a refund decides nothing, never creates a key, and returns 0.
-- Every other call returns its decision packed as answer says.
local now = tonumber(ARGV[1]) or servertime()
local n = tonumber(ARGV[2])
local commit = n > 0
if not commit then
	n = -n
end
local elapsed = ARGV[3] and tonumber(ARGV[3])
