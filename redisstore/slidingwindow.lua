-- Sliding window counter: one string key, "idx:prev:cur". core's
-- slidingWindow.decide. The estimate's comparison
-- prev*(W-e) + (cur+n)*W <= L*W reaches 2^80; it is made exactly as
-- cur + n + ceil(prev*(W-e)/W) <= L, the ceiling by muldiv.
--
-- ARGV[5..6]: L, W.
local L = tonumber(ARGV[5])
local W = tonumber(ARGV[6])

local idx = fdiv(now, W)
local sidx, prev, cur = idx, 0, 0
local v = redis.call('GET', KEYS[1])
if v then
	local si, sp, sc = string.match(v, '^(-?%d+):(%d+):(%d+)$')
	si = tonumber(si)
	if idx == si + 1 then
		prev = tonumber(sc)
	elseif idx <= si then
		-- The same window, or a clock that went backwards: the stored
		-- window stays current.
		sidx, prev, cur = si, tonumber(sp), tonumber(sc)
	end
end
local e = math.max(now - sidx * W, 0)

-- weight is ceil(prev*(W-e)/W), the previous window's share.
local wq, wr = muldiv(prev, W - e, W)
local weight = wq
if wr > 0 then
	weight = wq + 1
end

local function resetAfter(c)
	if c > 0 then
		return 2 * W - e
	elseif prev > 0 then
		return W - e
	end
	return 0
end

-- floorMin returns min(floor(a*W/b), W) for 0 <= a, 0 < b.
local function floorMin(a, b)
	if a >= b then
		return W
	end
	return (muldiv(a, W, b))
end

if cur + n + weight > L then
	local retry
	local room = L - cur - n
	if room >= 0 and prev > 0 then
		local at = W - floorMin(room, prev)
		if at < W then
			retry = at - e
		end
	end
	if not retry then
		local at = 0
		if cur > 0 then
			at = W - floorMin(L - n, cur)
		end
		retry = W - e + at
	end
	return {0, math.max(L - cur - weight, 0), retry, resetAfter(cur), 0}
end
cur = cur + n
local reset = resetAfter(cur)
if commit then
	redis.call('SET', KEYS[1], int(sidx) .. ':' .. int(prev) .. ':' .. int(cur), 'PX', ttl(reset))
end
return {1, math.max(L - cur - weight, 0), 0, reset, 0}
