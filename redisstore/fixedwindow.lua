-- Fixed window: one string key, the window's index since the epoch and
-- the units counted in it, packed as '>i8i8' (earlier versions wrote
-- "idx:count", which is read too), and for a named policy (keep) the
-- Window it was written under, '>i8i8i8'. core's fixedWindow; a state
-- written under another Window, or under calendar windows (a named
-- policy's calendarwindow.lua state, 32 bytes), is carried over as core's
-- carry does (see changedAt), its count into the window that holds the
-- time of the change.
--
-- Constants: L, W, keep, fmt (the state's format).
--
-- Above --@decide, the fast part (see scripts.go's fastPart): a request to
-- count on a missing key, decided and written before any function is
-- made; below, decide's body, which reads the state the fast part's SET
-- answered (pre) or GETs it.
if commit and not elapsed and newset and n <= L then
	-- A request to count (on Redis 7 and later): written at once as on a
	-- missing key, by SET NX, which answers the state of a key that exists
	-- instead (GET), writing nothing; that is decided below as always.
	local idx = floor(now / W)
	local untilEnd = (idx + 1) * W - now
	if idx ~= fwi or n ~= fwn or W ~= fww or fmt ~= fwf then
		fwi, fwn, fww, fwf, fws = idx, n, W, fmt, bpack(fmt, idx, n, W)
	end
	pre = redis.call('SET', KEYS[1], fws, 'PX', arg(ceil(untilEnd / 1000) + margin), 'NX', 'GET')
	if not pre then
		fresh, fb, fd, fe = true, L - n, untilEnd, 0
	end
end
--@decide
local idx = floor(now / W)
local count = 0
local v = pre or redis.call('GET', KEYS[1])
-- moved: the state was carried over from another Window, and is written
-- back whatever the decision, so that it is converted once.
local moved = false
if v then
	local si, sc
	local b0 = byte(v)
	if b0 == 0 or b0 == 255 then
		if keep and #v == 32 then
			-- Written under calendar windows (calendarwindow.lua): the
			-- count of the period [si, se) that held the change's time c
			-- moves to the window of W that holds c.
			local se
			si, sc, se = bunpack('>i8i8i8', v)
			local c = changedAt(since, si, now)
			if c >= se then
				sc = 0
			end
			si, moved = floor(c / W), true
		elseif keep then
			local sw
			si, sc, sw = bunpack(fmt, v)
			if sw ~= W then
				-- Written under another Window: the count of the window
				-- that held the change's time c moves to the window of W
				-- that holds c.
				local c = changedAt(since, si * sw, now)
				if floor(c / sw) > si then
					sc = 0
				end
				si, moved = floor(c / W), true
			end
		else
			si, sc = bunpack(fmt, v)
		end
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
if elapsed == -2 then
	-- A charge (Settle, prelude.lua): the current window's count grows by
	-- n, up to 2·L, as core's fixedWindow.charge; it expires with the
	-- window, where the debt is forgotten.
	local room = 2 * L - count
	if room > 0 then
		if n > room then
			n = room
		end
		redis.call('SET', KEYS[1], bpack(fmt, idx, count + n, W), 'PX', arg(ceil(untilEnd / 1000) + margin))
	elseif moved then
		redis.call('SET', KEYS[1], bpack(fmt, idx, count, W), 'PX', arg(ceil(untilEnd / 1000) + margin))
	end
	return 0
end
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
			redis.call('SET', KEYS[1], bpack(fmt, idx, count, W), 'PX', arg(px))
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
	if moved then
		if count > 0 then
			redis.call('SET', KEYS[1], bpack(fmt, idx, count, W), 'PX', arg(ceil(untilEnd / 1000) + margin))
		else
			redis.call('DEL', KEYS[1])
		end
	end
	if count + n > L then
		-- (count is above L when a lower limit carried it over.)
		local room = L - count
		if room < 0 then
			room = 0
		end
		return 0, room, untilEnd, reset, 0
	end
	return 1, L - count, 0, reset, 0
end
count = count + n
redis.call('SET', KEYS[1], bpack(fmt, idx, count, W), 'PX', arg(ceil(untilEnd / 1000) + margin))
return 1, L - count, 0, untilEnd, 0
