-- Calendar window: core's fixedWindow over calendar periods
-- (core.Calendar). One string key: the period's start and end (Unix µs)
-- and the units counted in it, packed as '>i8i8i8', and for a named
-- policy (keep) the calendar's id (its period and zone), '>i8i8i8i8'.
--
-- ARGV[4], ARGV[5], ARGV[6] are s0 < e0 < e1: the period [s0, e0) that
-- holds the client's reading of the time, and the next one, [e0, e1). The
-- script counts in the one that holds now; when neither does (the client's
-- clock and the server's disagree, or a period has just ended), it writes
-- nothing and answers resync: 2 and now (a refund: -now), so that the
-- client computes the periods around now and calls again.
--
-- A named policy's key is shared with its epoch windows and its other
-- calendars (Limiter.SetPolicy, a restart), and its calls pass since
-- (prelude.lua) as ARGV[7]: a state written under another
-- calendar (another id) or epoch windows (fixedwindow.lua's '>i8i8i8',
-- idx, count and W) is carried over as core's carry does (see changedAt):
-- the count of the window that held the change's time c moves to the
-- period that holds c, and is written back whatever the decision.
--
-- Constants: L, keep, fmt (the state's format), CID (the calendar's id).
local s0, e0, e1 = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
since = ARGV[7] -- (the prelude's ARGV[4] is s0 here)
local idx, wend
if s0 <= now and now < e0 then
	idx, wend = s0, e0
elseif e0 <= now and now < e1 then
	idx, wend = e0, e1
elseif elapsed then
	return -now
else
	return 2, now, 0, 0, 0
end
local count = 0
local v
if commit and not elapsed and newset and n <= L then
	-- As fixedwindow.lua: a request to count writes a missing key at once.
	local untilEnd = wend - now
	v = redis.call('SET', KEYS[1], bpack(fmt, idx, n, wend, CID), 'PX', arg(ceil(untilEnd / 1000) + margin), 'NX', 'GET')
	if not v then
		return 1, L - n, 0, untilEnd, 0, true
	end
else
	v = redis.call('GET', KEYS[1])
end
-- moved: the state was carried over from other windows, and is written
-- back whatever the decision, so that it is converted once.
local moved = false
if v then
	local si, sc, se, sid
	if keep and #v == 24 then
		-- Epoch windows: [si·sw, (si+1)·sw).
		local sw
		si, sc, sw = bunpack('>i8i8i8', v)
		si, se, sid = si * sw, (si + 1) * sw, -1
	else
		si, sc, se, sid = bunpack(fmt, v)
	end
	if keep and sid ~= CID then
		-- Written under other windows, [si, se): its count, if that
		-- window held the change's time c, moves to the period that holds
		-- c, the current one or (c < idx) one that has ended.
		local c = changedAt(since, si, now)
		if c < se and c >= idx then
			count = sc
		end
		moved = true
	elseif idx <= si then
		-- A clock that went backwards keeps the stored window current.
		idx, count, wend = si, sc, se
	end
end

local untilEnd = wend - now
if elapsed == -2 then
	-- A charge (Settle, prelude.lua): as fixedwindow.lua's, in the period.
	local room = 2 * L - count
	if room > 0 then
		if n > room then
			n = room
		end
		redis.call('SET', KEYS[1], bpack(fmt, idx, count + n, wend, CID), 'PX', arg(ceil(untilEnd / 1000) + margin))
	elseif moved then
		redis.call('SET', KEYS[1], bpack(fmt, idx, count, wend, CID), 'PX', arg(ceil(untilEnd / 1000) + margin))
	end
	return 0
end
if elapsed then
	-- A refund: if s = now - elapsed lies in the current window (s >=
	-- idx), the count loses n, not below 0, as fixedwindow.lua.
	if v and elapsed <= now - idx then
		count = count - n
		local px = margin
		if count > 0 then
			px = ceil(untilEnd / 1000) + margin
		else
			count = 0
		end
		if px > 0 then
			redis.call('SET', KEYS[1], bpack(fmt, idx, count, wend, CID), 'PX', arg(px))
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
			redis.call('SET', KEYS[1], bpack(fmt, idx, count, wend, CID), 'PX', arg(ceil(untilEnd / 1000) + margin))
		else
			redis.call('DEL', KEYS[1])
		end
	end
	if count + n > L then
		-- (count is above L when Limiter.SetPolicy lowered the limit.)
		local room = L - count
		if room < 0 then
			room = 0
		end
		return 0, room, untilEnd, reset, 0
	end
	return 1, L - count, 0, reset, 0
end
count = count + n
redis.call('SET', KEYS[1], bpack(fmt, idx, count, wend, CID), 'PX', arg(ceil(untilEnd / 1000) + margin))
return 1, L - count, 0, untilEnd, 0
