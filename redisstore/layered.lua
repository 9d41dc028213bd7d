-- Layered: the end of a layered script (see layeredSource). Ahead of it:
-- the prelude (now, n, commit, elapsed, since), then, for each layer, its
-- algorithm's script wrapped as a function of (KEYS, n, commit, since)
-- with that layer's constants, which returns the decision packed (see
-- clock.lua's answer), and the tables
--
--   layers, a list of those functions, in layer order;
--   keys, for each layer the list of its keys (one).
--
-- After the prelude's four arguments, a call may give each layer its own
-- cost (ARGV[5] to ARGV[4 + #layers], positive; ARGV[2] is then 1 or -1,
-- its sign alone telling a decision from a Peek) and then each layer its
-- own since (ARGV[5 + #layers] on; empty for the time of the call: see
-- clock.lua's changedAt). Without them every layer takes n and since.
--
-- A layer called with commit false decides and writes nothing, as a Peek.
-- Every layer but the last is checked without writing; the last is decided
-- for real, writing only if every layer before it passed. If it passed
-- too, the others are decided again, writing: on the same state at the
-- same time, so with the same outcome. A request thus counts in every
-- layer or in none, and one layer decides exactly as its own script.
--
-- Returns every layer's {allowed, remaining, retryAfter, resetAfter,
-- delay}, one after the other. A refund or a charge (elapsed given, see
-- prelude.lua) is made in every layer and returns 0.
--
-- A partial grant (elapsed -1) grants g, the least of n and every layer's
-- Remaining for a Peek of one unit, as core.Layered's decideAtMost: when a
-- layer denies one unit, or g is 0, it returns those Peeks' decisions and
-- 0; else it decides g in every layer as a request of cost g, and returns
-- its decisions and g, one number more.
local count = #layers
local costs, sinces = {}, {}
for i = 1, count do
	local c, s = ARGV[4 + i], ARGV[4 + count + i]
	costs[i] = c and tonumber(c) or n
	sinces[i] = s or since
end
local granted
if elapsed == -1 then
	elapsed = nil -- the layers decide as for a request (see singleLua)
	local g, out = n, {}
	for i = 1, count do
		local a, b, c, d, e = bunpack(answer, layers[i](keys[i], 1, false, sinces[i]))
		if a ~= 1 then
			g = 0
		elseif b < g then
			g = b
		end
		local o = 5 * (i - 1)
		out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, b, c, d, e
	end
	if g <= 0 then
		out[5 * count + 1] = 0
		return out
	end
	for i = 1, count do
		costs[i] = g
	end
	granted = g
end
if elapsed then
	for i = 1, count do
		layers[i](keys[i], costs[i], true, sinces[i])
	end
	return 0
end
local ds, pass = {}, true
for i = 1, count - 1 do
	ds[i] = {bunpack(answer, layers[i](keys[i], costs[i], false, sinces[i]))}
	pass = pass and ds[i][1] == 1
end
ds[count] = {bunpack(answer, layers[count](keys[count], costs[count], commit and pass, sinces[count]))}
pass = pass and ds[count][1] == 1
if commit and pass then
	for i = 1, count - 1 do
		ds[i] = {bunpack(answer, layers[i](keys[i], costs[i], true, sinces[i]))}
	end
end
local out = {}
for i = 1, count do
	for j = 1, 5 do
		out[#out + 1] = ds[i][j]
	end
end
if granted then
	if not pass then
		granted = 0
	end
	out[#out + 1] = granted
end
return out
