-- Token bucket and leaky bucket: GCRA on one string key, "tat:frac", the
-- theoretical arrival time as whole microseconds and a remainder in 1/q µs
-- (0 <= frac < q), so that no value passes 2^53. The arithmetic is core's
-- gcra.decide, in units of 1/q µs.
--
-- ARGV[5..9]: q, T, C, dmax = floor(2C/q) + 1, leaky ("1" or "0").
local q = tonumber(ARGV[5])
local T = tonumber(ARGV[6])
local C = tonumber(ARGV[7])
local dmax = tonumber(ARGV[8])
local leaky = ARGV[9] == '1'

-- d is the backlog TAT - now in 1/q µs; outside [0, 2C] it reads as a full
-- bucket. diff beyond dmax means d > 2C, so d is formed only when it is
-- below 2C + q.
local d = 0
local v = redis.call('GET', KEYS[1])
if v then
	local us, frac = string.match(v, '^(-?%d+):(%d+)$')
	local diff = tonumber(us) - now
	if diff >= 0 and diff <= dmax then
		d = diff * q + tonumber(frac)
		if d > 2 * C then
			d = 0
		end
	end
end

local need = d + n * T
if need > C then
	return {0, fdiv(math.max(C - d, 0), T), cdiv(need - C, q), cdiv(d, q), 0}
end
local reset = cdiv(need, q)
local delay = 0
if leaky then
	delay = cdiv(d + (n - 1) * T, q)
end
if commit then
	local whole = fdiv(need, q)
	redis.call('SET', KEYS[1], int(now + whole) .. ':' .. int(need - whole * q), 'PX', ttl(reset))
end
return {1, fdiv(C - need, T), 0, reset, delay}
