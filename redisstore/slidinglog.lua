-- Sliding log: KEYS[1] a sorted set of the allowed requests, member
-- "at:n" scored by at (µs), one member per distinct at; KEYS[2] a string
-- holding the units of every member, so that a decision reads only the
-- members that have left the window, not the whole log. core's
-- slidingLog, decide and refund. A denied request writes nothing, so
-- entries that have left the window are removed by the next allowed
-- request or refund.
--
-- Constants: L, W.
local log, total = KEYS[1], KEYS[2]

local function entry(m)
	local at, units = string.match(m, '^(-?%d+):(%d+)$')
	return tonumber(at), tonumber(units)
end

-- A request allowed at s counts while now - W < s.
local cutoff = now - W

if elapsed then
	-- A refund: the request's entry is at s = now - elapsed or later. If s
	-- is still in the window, the entries that have left it are removed,
	-- as an allowed request removes them, and up to n units are taken from
	-- the entries at s or later, oldest first, reducing the last one
	-- touched when it holds more than needed. If s has left the window, the
	-- units may have left too, and the live entries are other requests':
	-- nothing is given back. Removed members leave the sorted set its
	-- expiry (a reduced one is added before its old member goes), DECRBY
	-- leaves the units' string its own, and a log left empty is deleted:
	-- an empty log decides as no log.
	if elapsed >= W then
		return 0
	end
	local sum = redis.call('GET', total)
	if not sum then
		return 0
	end
	local gone = 0
	for _, m in ipairs(redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)) do
		local _, units = entry(m)
		gone = gone + units
	end
	if gone > 0 then
		redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
	end
	local from = now - elapsed
	local left = n
	while left > 0 do
		local chunk = redis.call('ZRANGEBYSCORE', log, from, '+inf', 'LIMIT', 0, 64)
		for _, m in ipairs(chunk) do
			local at, units = entry(m)
			if units > left then
				redis.call('ZADD', log, at, string.format('%d:%d', at, units - left))
				redis.call('ZREM', log, m)
				left = 0
				break
			end
			redis.call('ZREM', log, m)
			left = left - units
			if left == 0 then
				break
			end
		end
		-- A full chunk emptied entries; the next starts where they were.
		if #chunk < 64 then
			break
		end
	end
	if redis.call('EXISTS', log) == 0 then
		redis.call('DEL', total)
	elseif gone + n - left > 0 then
		redis.call('DECRBY', total, gone + n - left)
	end
	return 0
end

local sum = tonumber(redis.call('GET', total) or '0')
local expired = 0
if sum > 0 then
	local gone = redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)
	expired = #gone
	for _, m in ipairs(gone) do
		local _, units = entry(m)
		sum = sum - units
	end
end

if sum + n > L then
	-- Entries leave oldest first; find the one whose leaving makes room.
	local free, freed, retry, offset = sum + n - L, 0, nil, 0
	while not retry do
		local chunk = redis.call('ZRANGEBYSCORE', log, string.format('(%d', cutoff), '+inf', 'LIMIT', offset, 64)
		for _, m in ipairs(chunk) do
			local at, units = entry(m)
			freed = freed + units
			if freed >= free then
				retry = at + W - now
				break
			end
		end
		if #chunk < 64 then
			break
		end
		offset = offset + 64
	end
	local newest = redis.call('ZRANGE', log, -1, -1)[1]
	local reset = 0
	if newest then
		local last = entry(newest)
		reset = last + W - now
		if reset < 0 then
			reset = 0
		end
	end
	-- retry is always found while the two keys agree; if someone deleted one
	-- of them, the log's end is the safe answer.
	return {0, L - sum, retry or reset, reset, 0}
end

-- A clock that went backwards records at the latest time seen, so the log
-- stays in order and nothing leaves early.
local at = now
local newest = redis.call('ZRANGE', log, -1, -1)[1]
local merge
if newest then
	local last, units = entry(newest)
	if last > cutoff then
		if last >= at then
			at = last
			merge = units
		end
	end
end
local reset = at + W - now
if commit then
	if expired > 0 then
		redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
	end
	local units = n
	if merge then
		redis.call('ZREM', log, newest)
		units = units + merge
	end
	redis.call('ZADD', log, at, string.format('%d:%d', at, units))
	local ms = ceil(reset / 1000) + margin
	redis.call('SET', total, sum + n, 'PX', ms)
	redis.call('PEXPIRE', log, ms)
end
return {1, L - sum - n, 0, reset, 0}
