-- Sliding window counter: one string key, the current window's index and
-- the previous and current counts, packed as '>i8i8i8' (earlier versions
-- wrote "idx:prev:cur", which is read too), and for a named policy
-- (keep) the Window it was written under, '>i8i8i8i8'. core's
-- slidingWindow, decide, refund and carry: a state written under another
-- Window becomes, at the change's time c (see changedAt), the current
-- count of the window of W that holds c, its estimate at c rounded up. The estimate's comparison
-- prev*(W-e) + (cur+n)*W <= L*W reaches 2^80; it is made exactly as
-- cur + n + ceil(prev*(W-e)/W) <= L, the ceiling by muldiv.
--
-- Constants: L, W, keep, fmt (the state's format).
--
-- Above --@decide, the fast part (see scripts.go's fastPart), as
-- fixedwindow.lua's.

if commit and not elapsed and newset and n <= L then
	-- A request to count (on Redis 7 and later): written at once as on a
	-- missing key, by SET NX, which answers the state of a key that exists
	-- instead (GET), writing nothing; that is decided below as always.
	local idx = floor(now / W)
	local reset = 2 * W - (now - idx * W)
	if idx ~= swi or n ~= swn or W ~= sww or fmt ~= swf then
		swi, swn, sww, swf, sws = idx, n, W, fmt, bpack(fmt, idx, 0, n, W)
	end
	pre = redis.call('SET', KEYS[1], sws, 'PX', arg(ceil(reset / 1000) + margin), 'NX', 'GET')
	if not pre then
		fresh, fb, fd, fe = true, L - n, reset, 0
	end
end
--@decide
-- muldiv returns floor(a*b/c) and the remainder a*b mod c, exactly, for
-- 0 <= a < 2^35, 0 <= b < 2^45, 0 < c < 2^45, when the quotient is below
-- 2^53. a*b can reach 2^80, so past 2^53 it divides digit by digit: with
-- 7-bit digits of a, every partial sum r*128 + digit*b stays below 2^53.
local function muldiv(a, b, c)
	local p = a * b
	if p < 9007199254740992 then
		local q = floor(p / c)
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
		local t = floor(s / c)
		q = q * 128 + t
		r = s - t * c
	end
	return q, r
end

local idx = floor(now / W)
local sidx, prev, cur = idx, 0, 0
local v = pre or redis.call('GET', KEYS[1])
-- moved: the state was carried over from another Window, and is written
-- back whatever the decision, so that it is converted once.
local moved = false
if v then
	local si, sp, sc
	local b0 = byte(v)
	if b0 == 0 or b0 == 255 then
		if keep then
			local sw
			si, sp, sc, sw = bunpack(fmt, v)
			if sw ~= W then
				-- Written under another Window: the estimate at c, rolled
				-- as decisions roll it, becomes the count of the window of
				-- W that holds c (at most 2^32 - 1, as core keeps it).
				local c = changedAt(since, si * sw, now)
				local ci = floor(c / sw)
				if ci == si + 1 then
					sp, sc = sc, 0
				elseif ci > si + 1 then
					sp, sc = 0, 0
				end
				local w, r = muldiv(sp, sw - (c - ci * sw), sw)
				if r > 0 then
					w = w + 1
				end
				sc = sc + w
				if sc > 4294967295 then
					sc = 4294967295
				end
				si, sp, moved = floor(c / W), 0, true
			end
		else
			si, sp, sc = bunpack(fmt, v)
		end
	else
		si, sp, sc = string.match(v, '^(-?%d+):(%d+):(%d+)$')
		si, sp, sc = tonumber(si), tonumber(sp), tonumber(sc)
	end
	if idx == si + 1 then
		prev = sc
	elseif idx <= si then
		-- The same window, or a clock that went backwards: the stored
		-- window stays current.
		sidx, prev, cur = si, sp, sc
	end
end
-- e is the time into the current window. A clock that went back before
-- the stored window's start sees the state stand still, as at that start
-- (e = 0), until it gets there, lag from now: every wait is lag longer.
local into = now - sidx * W
local e, lag = into, 0
if e < 0 then
	e, lag = 0, -into
end

if elapsed then
	local write
	if elapsed == -2 then
		-- A charge (Settle, prelude.lua): cur grows by n, up to 2·L, as core's
		-- slidingWindow.charge; the rolled state is stored, expiring at its
		-- ResetAfter plus the margin, so the key lives while it owes.
		local room = 2 * L - cur
		write = room > 0 or moved
		if room > 0 then
			if n > room then
				n = room
			end
			cur = cur + n
		end
	else
		-- A refund: s = now - elapsed in the current window (s >= sidx·W; it is
		-- never past its end): cur loses n; in the previous one: prev loses n
		-- (the units may be in cur, which weighs more, so this gives back
		-- less); older: nothing. Neither goes below 0. The rolled state is
		-- stored, as core keeps it, expiring at its ResetAfter plus the margin.
		write = v and elapsed <= into + W
		if write then
			if elapsed <= into then
				cur = cur - n
				if cur < 0 then
					cur = 0
				end
			else
				prev = prev - n
				if prev < 0 then
					prev = 0
				end
			end
		end
	end
	if write then
		local reset = 0
		if cur > 0 then
			reset = lag + 2 * W - e
		elseif prev > 0 then
			reset = lag + W - e
		end
		local px = ceil(reset / 1000) + margin
		if px > 0 then
			redis.call('SET', KEYS[1], bpack(fmt, sidx, prev, cur, W), 'PX', arg(px))
		else
			redis.call('DEL', KEYS[1])
		end
	end
	return 0
end

-- weight is ceil(prev*(W-e)/W), the previous window's share.
local weight, wr = muldiv(prev, W - e, W)
if wr > 0 then
	weight = weight + 1
end
local remaining = L - cur - weight

if cur + n + weight > L then
	-- retry: when the previous window's share has shrunk enough, if that
	-- happens within this window; else the next window's start plus the
	-- time the current count's share takes to shrink.
	local retry
	local room = L - cur - n
	if room >= 0 and prev > 0 then
		-- W - min(floor(room*W/prev), W)
		local at = 0
		if room < prev then
			at = W - muldiv(room, W, prev)
		end
		if at < W then
			retry = at - e
		end
	end
	if not retry then
		local at = 0
		if cur > 0 then
			local a = L - n
			if a < cur then
				at = W - muldiv(a, W, cur)
			end
		end
		retry = W - e + at
	end
	retry = lag + retry
	local reset = 0
	if cur > 0 then
		reset = lag + 2 * W - e
	elseif prev > 0 then
		reset = lag + W - e
	end
	if remaining < 0 then
		remaining = 0
	end
	if moved then
		-- Carried over from another Window: the counters as they are.
		if reset > 0 then
			redis.call('SET', KEYS[1], bpack(fmt, sidx, prev, cur, W), 'PX', arg(ceil(reset / 1000) + margin))
		else
			redis.call('DEL', KEYS[1])
		end
	end
	return 0, remaining, retry, reset, 0
end
if not commit then
	-- A Peek: the counters as they are (remaining >= n > 0: it fits).
	local reset = 0
	if cur > 0 then
		reset = lag + 2 * W - e
	elseif prev > 0 then
		reset = lag + W - e
	end
	if moved then
		-- Carried over from another Window: the counters as they are.
		if reset > 0 then
			redis.call('SET', KEYS[1], bpack(fmt, sidx, prev, cur, W), 'PX', arg(ceil(reset / 1000) + margin))
		else
			redis.call('DEL', KEYS[1])
		end
	end
	return 1, remaining, 0, reset, 0
end
cur = cur + n
remaining = remaining - n
if remaining < 0 then
	remaining = 0
end
-- cur > 0 now.
local reset = lag + 2 * W - e
redis.call('SET', KEYS[1], bpack(fmt, sidx, prev, cur, W), 'PX', arg(ceil(reset / 1000) + margin))
return 1, remaining, 0, reset, 0
