-- Sliding log: one string key, a header and one 16-byte record per
-- distinct time a request was allowed, in time order; core's slidingLog.
--
--   base hd kd zeros zd dead total last | record base+1 | ... | record k
--
-- Records are numbered from the log's start: the string holds records
-- base+1 to k = base+kd, and those before h = base+hd have left the window
-- (h is core's head). Record j is (at_j, node_j): when it was allowed (µs),
-- and a node of a Fenwick tree over the records' units, the units of
-- records max(j - low(j), base)+1 to j, low(j) being the largest power of
-- two dividing j. So U(j), the units of records base+1 to j, is a sum of
-- about log2(j) nodes; one record's units change by changing as many; and
-- the first record where U reaches a value is found by reading as many
-- (search). The header holds dead = U(h-1), total = U(k), last = at_k, and
-- zeros, the records emptied by refunds since the last rebuild, the first
-- of them at base+zd (zd 0: none). hd, kd, zeros and zd are 32-bit, the
-- rest 64-bit, all big-endian and signed.
--
-- A decision reads O(log k) fields of 8 bytes, one GETRANGE each, and never
-- the whole log: the first live record (galloping from h: one or two reads
-- as a rule), U before it, and for a denied request the record whose
-- leaving makes room. An allowed request appends a record (one SETRANGE;
-- its node sums about one other) or adds to the last (one BITFIELD). A
-- refund takes its units from the records at since or later, oldest first,
-- changing O(log k) nodes (one BITFIELD) per record it takes from, at most
-- its cost n of them. A record it empties stays, with no units, unless it
-- is the last: the log then ends at its last record with units (k moves
-- back; the bytes past k are written over by the next append).
--
-- Amortized upkeep, each O(k) at most and paid for by as many decisions:
-- the records before h are cut off when they are at least as many as those
-- from h on (or the total passes 2^50, or the bytes past k are as many):
-- the rest is copied as it is (GETRANGE, SET), and the O(log k) nodes whose
-- span reached back past the new base are shortened; so a copy costs at
-- most one record's bytes per record that left. And when the emptied
-- records are at least half of those from the first of them on, those are
-- rebuilt without the empty ones (decoded and written again, O(1) Lua work
-- per record, once per as many refunds). Values stay exact integers: U
-- counts from base, and the total is cut back to the window's units (at
-- most L) before it passes 2^50.
--
-- A named policy's log (keep) has a 56-byte header, the Window it was
-- written under after the rest: a log written under another Window first
-- drops the records that had left that window at the change's time c (see
-- changedAt), as core's carry does; the others leave the new window as
-- always.
--
-- A denied request and a Peek write nothing. Constants: L, W, keep, and
-- wpx, ceil(W / 1000) + margin as a decimal string: a new log's PX.
-- The fast part (see scripts.go's fastPart), ahead of any function: a
-- request to count on a missing log (no header) is allowed (n <= L) and
-- written at once as the log's first record (see newlog below); else the
-- header read (pre) is decide's.
if commit and not elapsed then
	pre = redis.call('GETRANGE', KEYS[1], '0', keep and '55' or '47')
	if #pre < (keep and 56 or 48) then
		local s
		if keep then
			s = bpack('>i8i4i4i4i4i8i8i8i8i8i8', 0, 1, 1, 0, 0, 0, n, now, W, now, n)
		else
			s = bpack('>i8i4i4i4i4i8i8i8i8i8', 0, 1, 1, 0, 0, 0, n, now, now, n)
		end
		redis.call('SET', KEYS[1], s, 'PX', wpx)
		fresh, fb, fd, fe = true, L - n, W, 0
	end
end
--@decide
local pack, sunpack = struct.pack, struct.unpack -- Redis's struct library
local key = KEYS[1]
local H, hfmt, hend = 48, '>i8i4i4i4i4i8i8i8', '47'
if keep then
	H, hfmt, hend = 56, '>i8i4i4i4i4i8i8i8i8', '55'
end
-- A new log: the header and its first record, at t with n units.
local function newlog(t, n)
	if keep then
		return pack('>i8i4i4i4i4i8i8i8i8i8i8', 0, 1, 1, 0, 0, 0, n, t, W, t, n)
	end
	return pack('>i8i4i4i4i4i8i8i8i8i8', 0, 1, 1, 0, 0, 0, n, t, t, n)
end
local rebaseAt = 2 ^ 50

local hdr = pre or redis.call('GETRANGE', key, '0', hend) -- 0 to H - 1
if #hdr < H then
	-- No log: nothing to refund; a request is allowed (n <= L) and, if
	-- counted, the log's first record, the common case, written at once.
	if elapsed == -2 then
		-- A charge (Settle, prelude.lua) on no log: its first record, of
		-- up to 2·L units.
		if n > 2 * L then
			n = 2 * L
		end
		redis.call('SET', key, newlog(now, n), 'PX', wpx)
		return 0
	end
	if elapsed then
		return 0
	end
	if not commit then
		return 1, L, 0, 0, 0 -- a Peek: nothing is counted
	end
	redis.call('SET', key, newlog(now, n), 'PX', wpx)
	return 1, L - n, 0, W, 0, true
end
local base, hd, kd, zeros, zd, dead, total, last, sw = sunpack(hfmt, hdr)
if not keep then
	sw = W -- (sunpack's next position)
end
local h, k, zfrom = base + hd, base + kd, nil
if zd > 0 then
	zfrom = base + zd
end

-- low(j) for j >= 1, starting from p, a power of two dividing j: along a
-- walk up or down the tree low only grows, so a walk is O(log k) in all.
local function low(j, p)
	while j % (p + p) == 0 do
		p = p + p
	end
	return p
end
-- The byte offset of record j.
local function off(j)
	return H + 16 * (j - base - 1)
end
local function field(o)
	return (sunpack('>i8', redis.call('GETRANGE', key, o, o + 7)))
end
local function at(j)
	if j == k then
		return last
	end
	return field(off(j))
end
local function node(j)
	return field(off(j) + 8)
end
-- U(j) for base <= j <= k: the nodes j, j - low(j), ... above base.
local function U(j)
	local s, p = 0, 1
	while j > base do
		p = low(j, p)
		s = s + node(j)
		j = j - p
	end
	return s
end
-- U of each node of x's chain (x, x - low(x), ...) above base, by node:
-- what a cut at x or a rebuild from x+1 needs of the records up to x.
local function chainU(x)
	local chain, p = {}, 1
	while x > base do
		p = low(x, p)
		chain[#chain + 1] = x
		x = x - p
	end
	local u, s = {}, 0
	for i = #chain, 1, -1 do
		s = s + node(chain[i])
		u[chain[i]] = s
	end
	return u
end
-- The first record j with U(j) >= x, for 0 < x <= total: a walk down the
-- tree from the largest power of two, x keeping what is still to be found.
-- A node at or below base holds nothing: it is passed without a read.
local function search(x)
	local step, pos = 1, 0
	while step + step <= k do
		step = step + step
	end
	while step >= 1 do
		local q = pos + step
		if q <= k then
			if q <= base then
				pos = q
			else
				local v = node(q)
				if v < x then
					pos, x = q, x - v
				end
			end
		end
		step = step / 2
	end
	return pos + 1
end
-- The first record from lo on whose time is after x (k + 1 when none),
-- galloping forward from lo: O(log d) reads for an answer d records on.
local function after(lo, x)
	if lo > k or at(lo) > x then
		return lo
	end
	local good, step, hi = lo, 1, k + 1
	while good + step <= k do
		if at(good + step) > x then
			hi = good + step
			break
		end
		good, step = good + step, step + step
	end
	local a = good + 1
	while a < hi do
		local mid = floor((a + hi) / 2)
		if at(mid) > x then
			hi = mid
		else
			a = mid + 1
		end
	end
	return a
end
-- The same answer among records lo..k, galloping back from k: a refund's
-- records are usually the last few.
local function afterFromEnd(lo, x)
	if last <= x then
		return k + 1
	end
	local good, step, a = k, 1, lo -- at(good) > x; the answer is in a..good
	while good - step >= lo do
		if at(good - step) <= x then
			a = good - step + 1
			break
		end
		good, step = good - step, step + step
	end
	while a < good do
		local mid = floor((a + good) / 2)
		if at(mid) > x then
			good = mid
		else
			a = mid + 1
		end
	end
	return a
end
-- Adds d to record j's units: to the nodes j, j + low(j), ... up to k, in
-- one BITFIELD.
local function add(j, d)
	local args, p = {}, 1
	while j <= k do
		p = low(j, p)
		args[#args + 1] = 'INCRBY'
		args[#args + 1] = 'i64'
		args[#args + 1] = (off(j) + 8) * 8
		args[#args + 1] = d
		j = j + p
	end
	redis.call('BITFIELD', key, unpack(args))
end
-- Appends record k+1, at t with units: its node sums the nodes from k down
-- to k+1 - low(k+1) (or base), one on average.
local function append(t, units)
	local m = k + 1
	local stop = m - low(m, 1)
	if stop < base then
		stop = base
	end
	local v, j, p = units, k, 1
	while j > stop do
		p = low(j, p)
		v = v + node(j)
		j = j - p
	end
	k = m
	redis.call('SETRANGE', key, off(m), pack('>i8i8', t, v))
end
-- SET of the whole string: with px ms to live, or keeping the key's TTL.
local function setAll(s, px)
	if not px then
		px = redis.call('PTTL', key)
	end
	if px > 0 then
		redis.call('SET', key, s, 'PX', arg(px))
	else
		redis.call('SET', key, s)
	end
end
-- Rebuilds records a..k (a > base) without the empty ones, numbering them
-- on from a: a record keeps its U, so a node's new value is the difference
-- of two, from the records rebuilt or from a-1's chain. The bytes past the
-- new k stay.
local function rebuildFrom(a)
	local u = chainU(a - 1)
	local s = redis.call('GETRANGE', key, off(a), off(k) + 15)
	local prev = u[a - 1] or 0
	local old, ats, us = {}, {}, {} -- U of records a.. by j-a+1; the records kept
	local n = 0
	for i = 1, k - a + 1 do
		local j = a + i - 1
		local t, v = sunpack('>i8i8', s, 16 * i - 15)
		local c = j - low(j, 1)
		local uj
		if c >= a then
			uj = v + old[c - a + 1]
		else
			uj = v + (u[c] or 0)
		end
		old[i] = uj
		if uj > prev then
			n = n + 1
			ats[n], us[n] = t, uj
		end
		prev = uj
	end
	local parts = {}
	for i = 1, n do
		local c = a + i - 1 - low(a + i - 1, 1)
		local uc
		if c >= a then
			uc = us[c - a + 1]
		else
			uc = u[c] or 0
		end
		parts[i] = pack('>i8i8', ats[i], us[i] - uc)
	end
	redis.call('SETRANGE', key, off(a), table.concat(parts))
	k = a + n - 1
end
-- Cuts the log off at record nb (base <= nb < h): copies records nb+1..k
-- and shortens the nodes above nb whose span reached back to nb or before
-- (nb + low(nb), and so on up to k) to the units after nb; with px ms to
-- live, or keeping the key's TTL.
local function cutAt(nb, px)
	local u = chainU(nb)
	local unb = u[nb] or 0
	local upd = {}
	if nb > base then
		local p = low(nb, 1)
		local j = nb + p
		while j <= k do
			p = low(j, p)
			upd[#upd + 1] = j
			upd[#upd + 1] = node(j) + (u[j - p] or 0) - unb
			j = j + p
		end
	end
	local s = redis.call('GETRANGE', key, off(nb + 1), off(k) + 15)
	total, dead, base = total - unb, dead - unb, nb
	if zfrom and zfrom <= base then
		zfrom = h
	end
	local zrel = 0
	if zfrom then
		zrel = zfrom - base
	end
	setAll(pack(hfmt, base, h - base, k - base, zeros, zrel, dead, total, last, W) .. s, px)
	if #upd > 0 then
		local args = {}
		for i = 1, #upd, 2 do
			args[#args + 1] = 'SET'
			args[#args + 1] = 'i64'
			args[#args + 1] = (off(upd[i]) + 8) * 8
			args[#args + 1] = upd[i + 1]
		end
		redis.call('BITFIELD', key, unpack(args))
	end
end
-- Writes what changed in the header, after the upkeep it calls for; then,
-- with px, the key's expiry. shrunk: k may have moved back, leaving bytes
-- past it.
local function store(px, shrunk)
	if zfrom and zfrom < h then
		zfrom = h -- the empty records before h are cut off with the rest
	end
	if zfrom and zfrom > k then
		zeros, zfrom = 0, nil -- every empty record was past the end
	end
	if zfrom and zeros + zeros >= k - zfrom + 1 then
		rebuildFrom(zfrom)
		zeros, zfrom, shrunk = 0, nil, true
	end
	local count = k - h + 1
	local cut = h - 1 - base >= count or total > rebaseAt
	if not cut and shrunk then
		cut = (redis.call('STRLEN', key) - H) / 16 - (k - base) >= count
	end
	if cut then
		cutAt(h - 1, px)
		return
	end
	local zrel = 0
	if zfrom then
		zrel = zfrom - base
	end
	redis.call('SETRANGE', key, 0, pack(hfmt, base, h - base, k - base, zeros, zrel, dead, total, last, W))
	if px then
		redis.call('PEXPIRE', key, arg(px))
	end
end

-- moved: the log was carried over from another Window, and its header is
-- written back whatever the decision, so that it is converted once.
local moved = false
if sw ~= W then
	-- Written under another Window: the records that had left it at c
	-- are dropped first (a longer window does not bring them back).
	local f0 = after(h, changedAt(since, last, now) - sw)
	if f0 > h then
		h, dead = f0, U(f0 - 1)
	end
	moved = true
end

-- A request allowed at t counts while now - W < t, and the records before
-- h no longer count (as core's head keeps them out when the clock goes
-- back); f is the first record that counts, uf the units before it.
local f = after(h, now - W)
local uf = dead
if f > h then
	uf = U(f - 1)
end

if elapsed == -2 then
	-- A charge (Settle, prelude.lua): n units recorded as an allowed
	-- request's are (below), whatever room is left, up to 2·L units live
	-- in the log, as core's slidingLog.charge; the key expires with its
	-- last record.
	local sum = total - uf
	if n > 2 * L - sum then
		n = 2 * L - sum
	end
	if n <= 0 then
		return 0
	end
	local t = now
	if last > t then
		t = last
	end
	local px = ceil((t + W - now) / 1000) + margin
	if f > k then
		redis.call('SET', key, newlog(t, n), 'PX', arg(px))
	else
		h, dead = f, uf
		if last == t then
			add(k, n)
		else
			append(t, n)
		end
		total, last = total + n, t
		store(px, false)
	end
	return 0
end
if elapsed then
	-- A refund: the request's record is at since = now - elapsed or later.
	-- If since is still in the window, up to n units are taken from the
	-- records at since or later, oldest first. If since has left the
	-- window, the units may have left too, and the live records are other
	-- requests': nothing is given back. A log left with no units is
	-- deleted: an empty log decides as no log. The key keeps its expiry.
	if elapsed >= W then
		return 0
	end
	if f > k then
		-- Nothing is left in the window: core empties the log.
		redis.call('DEL', key)
		return 0
	end
	-- What has left the window is removed, as core's refund removes it,
	-- also when nothing is given back.
	local moved = f > h
	h, dead = f, uf
	local i = afterFromEnd(f, now - elapsed - 1)
	if i > k then
		if moved then
			store(nil, false)
		end
		return 0
	end
	local before = uf
	if i > f then
		before = U(i - 1)
	end
	if n >= total - before then
		-- Everything from i on is taken: the log ends at its last record
		-- with units before i, if one is left in the window.
		if before <= uf then
			redis.call('DEL', key)
			return 0
		end
		local j = search(before)
		last, total = at(j), before
		k = j
		store(nil, true)
		return 0
	end
	-- Record i first, the request's own as a rule; then each next record
	-- with units, found by search (an emptied one holds none). The last
	-- record keeps units.
	local left, m, um = n, i, U(i)
	while left > 0 do
		if um <= before then
			m = search(before + 1)
			um = U(m)
		end
		local take = um - before
		if take > left then
			take = left
		else
			zeros = zeros + 1
			if not zfrom or m < zfrom then
				zfrom = m
			end
		end
		add(m, -take)
		total, left, um = total - take, left - take, before
	end
	store(nil, false)
	return 0
end

local sum = total - uf
if sum + n > L or not commit then
	local a, b, c, d
	if sum + n > L then
		-- Records leave oldest first: the one whose leaving makes room is
		-- the first j with U(j) - uf >= sum + n - L. (sum is above L
		-- when a lower limit carried the log over.)
		b = L - sum
		if b < 0 then
			b = 0
		end
		a, c, d = 0, at(search(uf + sum + n - L)) + W - now, last + W - now
	else
		-- A Peek: the log as it is. Its last record holds units, so it
		-- is in the window exactly when the window holds any.
		a, b, c, d = 1, L - sum, 0, 0
		if sum > 0 then
			d = last + W - now
		end
	end
	if moved then
		-- Carried over: written back as it is, expiring as the new
		-- Window says (its last record holds units), after the answer
		-- is read (the upkeep may cut the log).
		if f > k then
			redis.call('DEL', key)
		else
			h, dead = f, uf
			store(ceil((last + W - now) / 1000) + margin, false)
		end
	end
	return a, b, c, d, 0
end

-- A clock that went backwards records at the latest time seen, so the log
-- stays in order and nothing leaves early.
local t = now
if last > t then
	t = last
end
local reset = t + W - now
local px = ceil(reset / 1000) + margin
if f > k then
	-- Everything has left: a new log.
	redis.call('SET', key, newlog(t, n), 'PX', arg(px))
else
	h, dead = f, uf
	if last == t then
		add(k, n)
	else
		append(t, n)
	end
	total, last = total + n, t
	store(px, false)
end
return 1, L - sum - n, 0, reset, 0
