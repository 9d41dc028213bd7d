-- Sliding log: one string key, a header and one 16-byte record per
-- distinct time a request was allowed, in time order:
--
--   base cut | at_1 cum_1 | at_2 cum_2 | ... | at_k cum_k
--
-- all big-endian signed 64-bit integers: at_j is when record j was allowed
-- (µs), cum_j the units allowed up to and including it, base the units
-- allowed before the first record, and cut the time up to which records
-- count as removed. Record j thus holds cum_j - cum_(j-1) units (cum_0 =
-- base), and the units of any run of records are one subtraction. at is
-- strictly increasing, so the first live record is found by binary search.
-- A decision reads O(log k) records and writes one: an allowed request
-- appends a record (or adds to the last) and moves cut to now - W, as
-- core's log removes what has left the window; the bytes of removed records
-- are cut off by a rewrite only when they are at least half of the log, or
-- the log is short, so copying is paid at most once per record. cut keeps a
-- removed record removed when the clock later goes back, as in core's
-- slidingLog, decide and refund, which this mirrors.
--
-- cum grows by at most L per window while the key lives; a log whose cum
-- would pass 2^50 is rewritten from base 0, so every value stays an exact
-- integer (under 2^53). A denied request and a Peek write nothing.
--
-- Constants: L, W.
local pack, unpack, sub = struct.pack, struct.unpack, string.sub -- Redis's struct library
local rebaseAt, short = 2 ^ 50, 32

local s = redis.call('GET', KEYS[1])
if not s then
	-- No log: nothing to refund; a request is allowed (n <= L) and, if
	-- counted, the log's first record, the common case, written at once.
	if elapsed then
		return 0
	end
	if commit then
		redis.call('SET', KEYS[1], pack('>i8i8i8i8', 0, now - W, now, n), 'PX', ceil(W / 1000) + margin)
	end
	return {1, L - n, 0, W, 0}
end
local k, cut = 0, nil
if #s >= 32 then
	k = (#s - 16) / 16
	cut = unpack('>i8', s, 9)
end
-- Record j's time and cum, and cum(0), the base.
local function at(j)
	return (unpack('>i8', s, 16 * j + 1))
end
local function cum(j)
	if k == 0 then
		return 0
	elseif j == 0 then
		return (unpack('>i8', s, 1))
	end
	return (unpack('>i8', s, 16 * j + 9))
end

-- A request allowed at t counts while now - W < t and t > cut; f is the
-- first record that counts (k + 1 when none does).
local cutoff = now - W
local from = cutoff
if cut and cut > from then
	from = cut
end
local lo, hi = 1, k + 1
while lo < hi do
	local mid = floor((lo + hi) / 2)
	if at(mid) > from then
		hi = mid
	else
		lo = mid + 1
	end
end
local f = lo
-- Every write removes what has left the window at now.
local newCut = cutoff
if cut and cut > newCut then
	newCut = cut
end

-- rewrite stores the header and records f..last, then the record extra
-- when given, from base 0 when the log's cum has passed 2^50 (n is at most
-- L, at most 1e9 < 2^30, so cum stays below 2^53), with px ms to live (or
-- the key's own expiry when px is nil).
local function rewrite(last, extra, px)
	local base, shift = cum(f - 1), 0
	if cum(k) > rebaseAt then
		base, shift = 0, cum(f - 1)
	end
	local parts = {pack('>i8i8', base, newCut)}
	if shift == 0 then
		parts[2] = sub(s, 16 * f + 1, 16 * last + 16)
	else
		for j = f, last do
			parts[#parts + 1] = pack('>i8i8', at(j), cum(j) - shift)
		end
	end
	if extra then
		parts[#parts + 1] = pack('>i8i8', extra[1], extra[2] - shift)
	end
	if px then
		redis.call('SET', KEYS[1], table.concat(parts), 'PX', px)
	else
		local ttl = redis.call('PTTL', KEYS[1])
		if ttl > 0 then
			redis.call('SET', KEYS[1], table.concat(parts), 'PX', ttl)
		else
			redis.call('SET', KEYS[1], table.concat(parts))
		end
	end
end

if elapsed then
	-- A refund: the request's record is at t = now - elapsed or later. If t
	-- is still in the window, up to n units are taken from the records at
	-- t or later, oldest first, emptying some and reducing the last one
	-- touched when it holds more than needed. If t has left the window,
	-- the units may have left too, and the live records are other
	-- requests': nothing is given back. The log is rebuilt (O(k), as
	-- refunds are rare) and keeps its expiry; a log left empty is deleted:
	-- an empty log decides as no log.
	if elapsed >= W or k == 0 then
		return 0
	end
	local since = now - elapsed
	local left = n
	local records, total = {}, 0
	for j = f, k do
		local t, units = at(j), cum(j) - cum(j - 1)
		if t >= since and left > 0 then
			local take = units
			if take > left then
				take = left
			end
			units = units - take
			left = left - take
		end
		if units > 0 then
			total = total + units
			records[#records + 1] = pack('>i8i8', t, total)
		end
	end
	if #records == 0 then
		redis.call('DEL', KEYS[1])
		return 0
	end
	s = pack('>i8i8', 0, newCut) .. table.concat(records)
	k, f = #records, 1
	rewrite(k, nil, nil)
	return 0
end

local sum = 0
if f <= k then
	sum = cum(k) - cum(f - 1)
end

if sum + n > L then
	-- Records leave oldest first: the one whose leaving makes room is the
	-- first j with cum_j - cum_(f-1) >= sum + n - L.
	local need = cum(f - 1) + sum + n - L
	lo, hi = f, k
	while lo < hi do
		local mid = floor((lo + hi) / 2)
		if cum(mid) >= need then
			hi = mid
		else
			lo = mid + 1
		end
	end
	return {0, L - sum, at(lo) + W - now, at(k) + W - now, 0}
end

-- A clock that went backwards records at the latest time seen, so the log
-- stays in order and nothing leaves early.
local t = now
if f <= k and at(k) > t then
	t = at(k)
end
local reset = t + W - now
if commit then
	local px = ceil(reset / 1000) + margin
	local merge = f <= k and at(k) == t
	local last = k
	if merge then
		last = k - 1
	end
	if k - f < short or 2 * (f - 1) >= k or cum(k) > rebaseAt then
		-- A short log, or one at least half removed: rewritten.
		rewrite(last, {t, cum(k) + n}, px)
	else
		if newCut ~= cut then
			redis.call('SETRANGE', KEYS[1], 8, pack('>i8', newCut))
		end
		if merge then
			redis.call('SETRANGE', KEYS[1], 16 * k + 8, pack('>i8', cum(k) + n))
		else
			redis.call('APPEND', KEYS[1], pack('>i8i8', t, cum(k) + n))
		end
		redis.call('PEXPIRE', KEYS[1], px)
	end
end
return {1, L - sum - n, 0, reset, 0}
