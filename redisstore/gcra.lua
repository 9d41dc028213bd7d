-- Token bucket and leaky bucket: GCRA on one string key holding the
-- theoretical arrival time as whole microseconds and a remainder in 1/q µs
-- (0 <= frac < q <= 64), so that no value passes 2^53: when q is 1, "tat"
-- as a decimal number; when q > 1, packed as '>i8B' (earlier versions
-- wrote "tat" or "tat:frac", which are read too). For a named policy
-- (keep), always packed, as '>i8Bi1i8i8' with the q and T it was written
-- under and the time it was written: a state written under another q or T
-- is carried over as core's bucket.carry does, at the change's time c (see
-- changedAt): its backlog raw becomes ceil(raw·T/T_old) in 1/q µs, a full
-- bucket stays full. The arithmetic is core's gcra, in units of 1/q µs.
--
-- Constants: q, T, C, dcap = 2^52, dmax = floor(dcap/q), leaky (a boolean),
-- keep.

-- The fast part (see scripts.go's fastPart), ahead of any function: a
-- request to count (on Redis 7 and later) is written at once as on a
-- missing key, a full bucket, by SET NX, which answers the state of a key
-- that exists instead (GET), writing nothing; that is decided below as
-- always. The state and its expiry are state(n·T)'s (below), written out:
-- px > 0, as n·T >= 1.
if commit and not elapsed and newset and n * T <= C then
	local b = n * T
	local whole = floor(b / q)
	local sv
	if keep then
		sv = bpack('>i8Bi1i8i8', now + whole, b - whole * q, q, T, now)
	elseif q == 1 then
		sv = arg(now + whole)
	else
		sv = bpack('>i8B', now + whole, b - whole * q)
	end
	pre = redis.call('SET', KEYS[1], sv, 'PX', arg(ceil(ceil(b / q) / 1000) + margin), 'NX', 'GET')
	if not pre then
		local delay = 0
		if leaky then
			delay = ceil((n - 1) * T / q)
		end
		fresh, fb, fd, fe = true, floor((C - b) / T), ceil(b / q), delay
	end
end
--@decide
-- raw is the backlog TAT - now in 1/q µs, and d the backlog a decision
-- reads: a raw one at most 0 (a key idle since TAT) is a full bucket, d = 0;
-- a positive one is the true backlog, however far a clock stepped back put
-- TAT ahead of now (the key waits until the clock catches up), capped at
-- dcap so that every sum below stays under 2^53. diff beyond dmax means
-- raw > dcap, so raw is formed only when it is below dcap + q; beyond, it
-- is set to dcap + 1, which says as much.
-- state returns what TAT = now + b (b in 1/q µs, 0 <= b < 2^53) is
-- stored as, and its expiry: when the bucket is full again, plus the
-- margin, in ms.
local function state(b)
	local whole = floor(b / q)
	local px = ceil(ceil(b / q) / 1000) + margin
	if keep then
		return bpack('>i8Bi1i8i8', now + whole, b - whole * q, q, T, now), px
	end
	if q == 1 then
		return arg(now + whole), px
	end
	return bpack('>i8B', now + whole, b - whole * q), px
end

-- carry returns the state (tat, frac), in units of 1/sq µs of which a
-- unit of cost takes sT, converted to this policy's at c, as core's
-- bucket.carry: a backlog raw > 0 at c (capped at dcap) becomes
-- ceil(raw·T/sT) in 1/q µs (capped likewise); a full bucket stays full.
-- The product raw·T reaches 2^103: with raw = qa·sT + ra, it is
-- qa·T + ra·T/sT, the second formed bit by bit of T with its remainder
-- kept below sT, so no sum passes 2^53.
-- (Built for a named policy only: a function costs a closure per call.)
local carry
if keep then
	carry = function(tat, frac, sq, sT, c)
		local diff = tat - c
		if diff < 0 or diff == 0 and frac == 0 then
			return c, 0
		end
		local raw = dcap
		if diff <= floor(dcap / sq) then
			raw = diff * sq + frac
			if raw > dcap then
				raw = dcap
			end
		end
		local qa = floor(raw / sT)
		local ra = raw - qa * sT
		local b = dcap -- ceil(raw·T/sT), capped
		if qa * T <= dcap then
			local p = 1
			while p + p <= T do
				p = p + p
			end
			local Q, R, rest = 0, 0, T
			while p >= 1 do
				Q, R = Q + Q, R + R
				if R >= sT then
					Q, R = Q + 1, R - sT
				end
				if rest >= p then
					rest, R = rest - p, R + ra
					if R >= sT then
						Q, R = Q + 1, R - sT
					end
				end
				p = p / 2
			end
			if R > 0 then
				Q = Q + 1
			end
			if qa * T + Q < dcap then
				b = qa * T + Q
			end
		end
		local whole = floor(b / q)
		return c + whole, b - whole * q
	end
end

local d, raw = 0, 0
local v = pre or redis.call('GET', KEYS[1])
-- moved: the state was carried over from another q or T, and is written
-- back whatever the decision, so that it is converted once.
local moved = false
if v then
	local tat, frac
	local b0 = byte(v)
	if b0 == 0 or b0 == 255 then
		if keep then
			local sq, sT, sw
			tat, frac, sq, sT, sw = bunpack('>i8Bi1i8i8', v)
			if sq ~= q or sT ~= T then
				tat, frac = carry(tat, frac, sq, sT, changedAt(since, sw, now))
				moved = true
			end
		else
			tat, frac = bunpack('>i8B', v)
		end
	else
		tat, frac = tonumber(v), 0
		if not tat then
			local us, f = string.match(v, '^(-?%d+):(%d+)$')
			tat, frac = tonumber(us), tonumber(f)
		end
	end
	local diff = tat - now
	if diff > dmax then
		raw = dcap + 1
	elseif diff >= 0 then
		raw = diff * q + frac
	end
	if raw > dcap then
		d = dcap
	elseif raw > 0 then
		d = raw
	end
end

-- set stores TAT = now + b (b in 1/q µs, 0 <= b < 2^53), expiring when the
-- bucket is full again, plus the margin; a state that is full now and has
-- no margin is deleted instead.
local function set(b)
	local sv, px = state(b)
	if px <= 0 then
		redis.call('DEL', KEYS[1])
	else
		redis.call('SET', KEYS[1], sv, 'PX', arg(px))
	end
end

if elapsed == -2 then
	-- A charge (Settle, prelude.lua): n more units at now, unconditionally,
	-- the backlog growing by n·T up to 2·C (one capacity of debt), as
	-- core's bucket.charge; at the bound, or beyond it, nothing is added.
	-- The expiry is the backlog's, so the key lives while it owes.
	local most = 2 * C
	if d < most then
		if n >= ceil((most - d) / T) then
			d = most
		else
			d = d + n * T
		end
		set(d)
	elseif moved then
		set(d)
	end
	return 0
end
if elapsed then
	-- A refund: the refill has already returned elapsed·q of the n·T
	-- counted, so at most g = n·T - elapsed·q still count; the backlog
	-- becomes max(0, raw - g). A full bucket, or a raw backlog beyond dcap
	-- (which decisions read capped), is left alone. elapsed·q reaches
	-- 2^58, but it is compared with n·T <= 2^51, which a rounded product
	-- compares with as the exact one does, and subtracted only below it.
	local give = n * T
	if raw > 0 and raw <= dcap and elapsed * q < give then
		local b = raw - (give - elapsed * q)
		if b < 0 then
			b = 0
		end
		set(b)
	end
	return 0
end

-- need <= dcap + C < 2^53.
local need = d + n * T
if need > C then
	local room = C - d
	if room < 0 then
		room = 0
	end
	if moved then
		set(d)
	end
	return 0, floor(room / T), ceil((need - C) / q), ceil(d / q), 0
end
local delay = 0
if leaky then
	delay = ceil((d + (n - 1) * T) / q)
end
if not commit then
	-- A Peek: the bucket as it is, and the Delay n would get.
	if moved then
		set(d)
	end
	return 1, floor((C - d) / T), 0, ceil(d / q), delay
end
set(need)
return 1, floor((C - need) / T), 0, ceil(need / q), delay
