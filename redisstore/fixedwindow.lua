-- Fixed window: one string key, the window's index since the epoch and
-- the units counted in it, packed as '>i8i8' (earlier versions wrote
-- "idx:count", which is read too). core's fixedWindow.
--
-- Constants: L, W.
local idx = floor(now / W)
local count = 0
local v
if commit and not elapsed and newset and n <= L then
	-- A request to count (on Redis 7 and later): written at once as on a
	-- missing key, by SET NX, which answers the state of a key that exists
	-- instead (GET), writing nothing; that is decided below as always.
	local untilEnd = (idx + 1) * W - now
	v = redis.call('SET', KEYS[1], bpack('>i8i8', idx, n), 'PX', arg(ceil(untilEnd / 1000) + margin), 'NX', 'GET')
	if not v then
		return 1, L - n, 0, untilEnd, 0, true
	end
else
	v = redis.call('GET', KEYS[1])
end
if v then
	local si, sc
	local b0 = byte(v)
	if b0 == 0 or b0 == 255 then
		si, sc = bunpack('>i8i8', v)
	else
		si, sc = string.match(v, '^(-?%d+):(%d+)$')
		si, sc = tonumber(si), tonumber(sc)
	end
	-- A clock that went backwards keeps the stored window current.
	if idx <= si then
		idx = si
		count = sc
	end
end

local untilEnd = (idx + 1) * W - now
if elapsed then
	-- A refund: if s = now - elapsed lies in the current window (s >=
	-- idx·W; it is never past its end), the count loses n, not below 0, and
	-- the current window is stored, as core keeps it. Else the units were
	-- counted in a window already forgotten, or may have been.
	if v and elapsed <= now - idx * W then
		count = count - n
		local px = margin
		if count > 0 then
			px = ceil(untilEnd / 1000) + margin
		else
			count = 0
		end
		if px > 0 then
			redis.call('SET', KEYS[1], bpack('>i8i8', idx, count), 'PX', arg(px))
		else
			redis.call('DEL', KEYS[1])
		end
	end
	return 0
end

if count + n > L or not commit then
	-- Denied, or a Peek: the window as it is.
	local reset = 0
	if count > 0 then
		reset = untilEnd
	end
	if count + n > L then
		return 0, L - count, untilEnd, reset, 0
	end
	return 1, L - count, 0, reset, 0
end
count = count + n
redis.call('SET', KEYS[1], bpack('>i8i8', idx, count), 'PX', arg(ceil(untilEnd / 1000) + margin))
return 1, L - count, 0, untilEnd, 0
