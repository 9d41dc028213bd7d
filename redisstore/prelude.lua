-- Shared by every script. Numbers are float64: every value below stays an
-- integer under 2^53, and each division is corrected to the exact floor.
--
-- ARGV[1] is now in microseconds, or empty to read the server's TIME.
-- ARGV[2] is the cost n, ARGV[3] is "1" to count an allowed request,
-- ARGV[4] is the TTL margin in milliseconds; the algorithm's constants follow.
-- Every script returns {allowed, remaining, retryAfter, resetAfter, delay},
-- durations in microseconds.

-- fdiv returns floor(a/b), exactly, for integers |a| < 2^53 and 0 < b < 2^53.
local function fdiv(a, b)
	local q = math.floor(a / b)
	local r = a - q * b
	if r < 0 then
		q = q - 1
	elseif r >= b then
		q = q + 1
	end
	return q
end

-- cdiv returns ceil(a/b) for 0 <= a, a + b < 2^53.
local function cdiv(a, b)
	return fdiv(a + b - 1, b)
end

-- muldiv returns floor(a*b/c) and the remainder a*b mod c, exactly, for
-- 0 <= a < 2^35, 0 <= b < 2^45, 0 < c < 2^45, when the quotient is below
-- 2^53. a*b can reach 2^80, so past 2^53 it divides digit by digit: with
-- 7-bit digits of a, every partial sum r*128 + digit*b stays below 2^53.
local function muldiv(a, b, c)
	local p = a * b
	if p < 9007199254740992 then
		local q = fdiv(p, c)
		return q, p - q * c
	end
	local digits = {}
	while a > 0 do
		local d = a % 128
		digits[#digits + 1] = d
		a = (a - d) / 128
	end
	local q, r = 0, 0
	for i = #digits, 1, -1 do
		local s = r * 128 + digits[i] * b
		local t = fdiv(s, c)
		q = q * 128 + t
		r = s - t * c
	end
	return q, r
end

-- int formats an integer for Redis without an exponent.
local function int(x)
	return string.format('%d', x)
end

local now = tonumber(ARGV[1])
if not now then
	if redis.replicate_commands then
		redis.replicate_commands()
	end
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n = tonumber(ARGV[2])
local commit = ARGV[3] == '1'
local margin = tonumber(ARGV[4])

-- ttl returns the expiry in milliseconds for a state that becomes fresh in
-- us microseconds.
local function ttl(us)
	return cdiv(us, 1000) + margin
end
