-- Batch: the end of a batch script (see batchSource), which makes the
-- decisions of #KEYS calls of one policy's script in one call, one after
-- the other, each exactly as that script would: KEYS[i] is decision i's
-- key, ARGV[2i-1] its now (empty: the server's TIME, read once for the
-- batch) and ARGV[2i] its cost (negative: a Peek); for a named policy, the
-- last ARGV is the limiter's since (prelude.lua), the same for all. Ahead
-- of it: the policy's constants, clock.lua, batchArg, and decide, the
-- algorithm as a function.
--
-- Returns the decisions' answers, packed one after the other: a fresh one
-- (see clock.lua's answer) as one '>i8', -2 - resetAfter, the same for
-- every fresh decision of the batch on the server's TIME, so packed once;
-- any other as answer says. A decision that fails (a Redis error, or a
-- state the script cannot read) is packed as -1, the length of its
-- message, and the message, and the others are made all the same, as
-- separate calls would be. The first 8 bytes of each thus say which it is:
-- 0 or 1, allowed; -1, an error; below, fresh.
-- servertime returns the server's TIME in microseconds.
local function servertime()
	-- Redis 5 and later replicate a script's effects, not the script, so
	-- reading TIME before a write is allowed; before 5 it must be asked for.
	-- (REDIS_VERSION_NUM exists since 7.)
	if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
		redis.replicate_commands()
	end
	local t = redis.call('TIME')
	return t[1] * 1000000 + t[2]
end

local K, out, tnow = {}, {}, nil
local since = ARGV[#KEYS + #KEYS + 1]
local lastreset, lastfresh
for i = 1, #KEYS do
	local now, n = ARGV[i + i - 1], ARGV[i + i]
	if now == '' then
		tnow = tnow or servertime()
		now = tnow
	else
		now = tonumber(now)
	end
	n = n == '1' and 1 or tonumber(n)
	local commit = n > 0
	if not commit then
		n = -n
	end
	K[1] = KEYS[i]
	local ok, a, b, c, d, e, fresh = pcall(decide, K, now, n, commit, nil, since)
	if ok then
		if fresh then
			if d ~= lastreset then
				lastreset, lastfresh = d, bpack('>i8', -2 - d)
			end
			out[i] = lastfresh
		else
			out[i] = bpack(answer, a, b, c, d, e)
		end
	else
		if type(a) == 'table' then
			a = a.err
		end
		a = tostring(a)
		out[i] = bpack('>i8i8', -1, #a) .. a
	end
end
return table.concat(out)
