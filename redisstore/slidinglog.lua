-- Sliding log: KEYS[1] a sorted set of the allowed requests, member
-- "at:n" scored by at (µs), one member per distinct at; KEYS[2] a string
-- holding the units of every member, so that a decision reads only the
-- members that have left the window, not the whole log. core's
-- slidingLog.decide. A denied request writes nothing, so entries that have
-- left the window are removed by the next allowed request.
--
-- Constants: L, W.
local log, total = KEYS[1], KEYS[2]

local function entry(m)
	local at, units = string.match(m, '^(-?%d+):(%d+)$')
	return tonumber(at), tonumber(units)
end

-- A request allowed at s counts while now - W < s.
local cutoff = now - W
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
