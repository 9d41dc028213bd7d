-- Batch: the end of a batch script (see batchSource), which makes the
-- decisions of #KEYS calls of one policy's script in one call, one after
-- the other, each exactly as that script would: KEYS[i] is decision i's
-- key, ARGV[2i-1] its now (empty: the server's TIME, read once for the
-- batch) and ARGV[2i] its cost (negative: a Peek). Ahead of it: the
-- policy's constants, clock.lua, and decide, the algorithm as a function.
--
-- Returns the decisions' answers, packed one after the other; a decision
-- that fails (a Redis error, or a state the script cannot read) is
-- packed as -1, the length of its message, and the message, and the
-- others are made all the same, as separate calls would be.
local K, out, tnow = {}, {}, nil
for i = 1, #KEYS do
	local now, n = tonumber(ARGV[i + i - 1]), tonumber(ARGV[i + i])
	if not now then
		tnow = tnow or servertime()
		now = tnow
	end
	local commit = n > 0
	if not commit then
		n = -n
	end
	K[1] = KEYS[i]
	local ok, a, b, c, d, e = pcall(decide, K, now, n, commit)
	if ok then
		out[i] = bpack(answer, a, b, c, d, e)
	else
		if type(a) == 'table' then
			a = a.err
		end
		a = tostring(a)
		out[i] = bpack('>i8i8', -1, #a) .. a
	end
end
return table.concat(out)
