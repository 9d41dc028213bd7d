-- Token bucket and leaky bucket: GCRA on one string key holding the
-- theoretical arrival time as whole microseconds and a remainder in 1/q µs
-- (0 <= frac < q), so that no value passes 2^53: "tat" when the remainder
-- is 0 (always, when q is 1), "tat:frac" otherwise. The arithmetic is
-- core's gcra.decide, in units of 1/q µs.
--
-- Constants: q, T, C, dmax = floor(2C/q) + 1, leaky (a boolean).

-- d is the backlog TAT - now in 1/q µs; outside [0, 2C] it reads as a full
-- bucket. diff beyond dmax means d > 2C, so d is formed only when it is
-- below 2C + q.
local d = 0
local v = redis.call('GET', KEYS[1])
if v then
	local tat, frac = tonumber(v), 0
	if not tat then
		local us, f = string.match(v, '^(-?%d+):(%d+)$')
		tat, frac = tonumber(us), tonumber(f)
	end
	local diff = tat - now
	if diff >= 0 and diff <= dmax then
		d = diff * q + frac
		if d > 2 * C then
			d = 0
		end
	end
end

-- need <= 3C < 2^53.
local need = d + n * T
if need > C then
	local room = C - d
	if room < 0 then
		room = 0
	end
	return {0, floor(room / T), ceil((need - C) / q), ceil(d / q), 0}
end
local reset = ceil(need / q)
local delay = 0
if leaky then
	delay = ceil((d + (n - 1) * T) / q)
end
if commit then
	local whole = floor(need / q)
	local frac = need - whole * q
	local px = ceil(reset / 1000) + margin
	if frac == 0 then
		redis.call('SET', KEYS[1], now + whole, 'PX', px)
	else
		redis.call('SET', KEYS[1], string.format('%d:%d', now + whole, frac), 'PX', px)
	end
end
return {1, floor((C - need) / T), 0, reset, delay}
