-- Ahead of decide in every script (scripts.go's decideLua, singleBody),
-- past the algorithm's fast part: a function costs a closure per call, which
-- a fresh decision of a script of one call does not make.
--
-- changedAt returns the time at which a state written under another
-- policy's parameters (a named policy's key keeps them in its state) is
-- converted to this policy's, as core.Memory.SetPolicy converts every
-- state when it is called: since, the time the limiter took this policy
-- (New or SetPolicy, in µs, a decimal string), but no earlier than lo, the
-- state's last write as far as the state tells (a limiter elsewhere may
-- have written it under the other policy since), and no later than now.
-- It is read only when the parameters differ.
local function changedAt(since, lo, now)
	local c = tonumber(since) or now
	if c < lo then
		c = lo
	end
	if c > now then
		c = now
	end
	return c
end
