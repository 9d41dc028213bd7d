-- Layered: the end of a layered script (see layeredSource). Ahead of it:
-- the prelude (now, n, commit), then, for each layer, its algorithm's
-- script wrapped as a function of (KEYS, n, commit) with that layer's
-- constants, which returns the decision packed (see clock.lua's answer),
-- and the tables
--
--   layers, a list of those functions, in layer order;
--   keys, for each layer the list of its keys (one).
--
-- A layer called with commit false decides and writes nothing, as a Peek.
-- Every layer but the last is checked without writing; the last is decided
-- for real, writing only if every layer before it passed. If it passed
-- too, the others are decided again, writing: on the same state at the
-- same time, so with the same outcome. A request thus counts in every
-- layer or in none, and one layer decides exactly as its own script.
--
-- Returns every layer's {allowed, remaining, retryAfter, resetAfter,
-- delay}, one after the other. A refund (elapsed given) is made in every
-- layer and returns 0.
local count = #layers
if elapsed then
	for i = 1, count do
		layers[i](keys[i], n, true)
	end
	return 0
end
local ds, pass = {}, true
for i = 1, count - 1 do
	ds[i] = {bunpack(answer, layers[i](keys[i], n, false))}
	pass = pass and ds[i][1] == 1
end
ds[count] = {bunpack(answer, layers[count](keys[count], n, commit and pass))}
pass = pass and ds[count][1] == 1
if commit and pass then
	for i = 1, count - 1 do
		ds[i] = {bunpack(answer, layers[i](keys[i], n, true))}
	end
end
local out = {}
for i = 1, count do
	for j = 1, 5 do
		out[#out + 1] = ds[i][j]
	end
end
return out
