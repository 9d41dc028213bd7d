package redisstore

import (
	_ "embed"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// The Lua sources. Each script is a header with the policy's constants,
// then the prelude (the clock, the shared arguments), then one algorithm:
// its fast part, then the function decide and the call of it (singleLua;
// see policyParts). A batch script has the header, the clock, decide (the
// fast part within) and batch.lua.
var (
	//go:embed clock.lua
	clockLua string
	//go:embed prelude.lua
	argsLua string
	//go:embed convert.lua
	convertLua string
	//go:embed batch.lua
	batchLua string
	//go:embed gcra.lua
	gcraLua string
	//go:embed fixedwindow.lua
	fixedWindowLua string
	//go:embed calendarwindow.lua
	calendarWindowLua string
	//go:embed slidingwindow.lua
	slidingWindowLua string
	//go:embed slidinglog.lua
	slidingLogLua string
)

// preludeLua is what every script of one call shares ahead of its
// algorithm: the clock, then the arguments.
var preludeLua = clockLua + argsLua

// singleLua ends a script of one call: it runs decide, and packs its
// decision, or returns a fresh one's resetAfter alone (see prelude.lua; a
// refund or a charge returns 0). pre is what the fast part read, for
// decide. A partial grant (elapsed -1, see prelude.lua) decides twice, as
// core's decideAtMost: a Peek of one unit, whose Remaining is the largest
// cost allowed now, then a request of min(n, Remaining) to count; it
// answers the decision and the units granted, six numbers, or the Peek's
// denial and 0, or a calendar's resync (2, now) as is.
const singleLua = `if elapsed then
	if elapsed == -1 then
		local a, b, c, d, e = decide(KEYS, now, 1, false, nil, since)
		if a ~= 1 or b <= 0 then
			return bpack('>i8i8i8i8i8i8', a, b, c, d, e, 0)
		end
		if b < n then
			n = b
		end
		a, b, c, d, e = decide(KEYS, now, n, true, nil, since)
		return bpack('>i8i8i8i8i8i8', a, b, c, d, e, n)
	end
	return decide(KEYS, now, n, commit, elapsed, since)
end
local a, b, c, d, e, fresh = decide(KEYS, now, n, commit, nil, since, pre)
if fresh and short then
	return d
end
return bpack(answer, a, b, c, d, e)
`

// decideMark ends an algorithm's fast part, in the algorithms that have
// one: a request to count on a missing key (a fresh answer, see clock.lua),
// the common case, decided and written by plain statements. A script of
// one call runs them ahead of any function, since making a function (a
// closure) costs Redis more than the statements do; the rest, decide's
// body, runs only if the key exists. The fast part may set pre, the state
// it read, which decide's body reads rather than reading it again, and
// for a fresh answer fresh (true) and fb, fd, fe, the answer's remaining,
// resetAfter and delay.
const decideMark = "--@decide\n"

// freshLocals declares what a fast part sets.
const freshLocals = "local pre, fresh, fb, fd, fe\n"

// fastPart splits alg into its fast part (empty if it has none) and
// decide's body.
func fastPart(alg string) (fast, body string) {
	if i := strings.Index(alg, decideMark); i >= 0 {
		return alg[:i], alg[i+len(decideMark):]
	}
	return "", alg
}

// singleFresh answers a fresh decision of the fast part in a script of
// one call: its resetAfter alone (short), or packed.
const singleFresh = `if fresh then
	if short then
		return fd
	end
	return bpack(answer, 1, fb, 0, fd, fe)
end
`

// batchArg is arg in a batch script (see prelude.lua): the decimal string
// of x, kept for the next call, as a batch's decisions on the server's TIME
// mostly pass the same expiry (and, for the buckets, the same state):
// formatting a number costs Redis (or Lua) more than comparing two.
const batchArg = `local lastx, lasts
local function arg(x)
	if x ~= lastx then
		lastx, lasts = x, string.format('%d', x)
	end
	return lasts
end
`

// scripts holds one *redis.Script per source, so that limiters of one
// policy share it (and its SHA-1, computed once), and forms (functions.go)
// its forms by SHA-1 and by function name, for EVAL after NOSCRIPT (a call
// made under a policy that SetPolicy has since replaced runs that policy's
// script) and FCALL.
var scripts sync.Map // string → *redis.Script

// scriptFor returns the script of source src.
func scriptFor(src string) *redis.Script {
	if s, ok := scripts.Load(src); ok {
		return s.(*redis.Script)
	}
	// Its forms first, so that whoever finds the script finds them.
	sc := redis.NewScript(src)
	f := &scriptForms{src: src, sha: sc.Hash()}
	f.fn, f.code = libraryOf(src)
	forms.LoadOrStore(f.sha, f)
	if f.fn != "" {
		forms.LoadOrStore(f.fn, f)
	}
	s, _ := scripts.LoadOrStore(src, sc)
	return s.(*redis.Script)
}

// sourceOf returns the source of the script whose SHA-1 (or function name)
// is id, a string that scriptFor returned the script of.
func sourceOf(id any) any {
	if f := formsOf(id); f != nil {
		return f.src
	}
	return id // not ours: Redis says so
}

// maxBacklog is the largest backlog, in 1/q µs, that the token and leaky
// buckets read, as core's do: a clock stepped back further waits as if
// stepped back this far. Below it, backlog + C stays under 2^53, exact in
// Lua's float64 numbers.
const maxBacklog = 1 << 52

// scriptSource returns the script of p: its constants are written into the
// source as Lua locals, so that a call passes only the time and the cost
// (and a refund's elapsed time), and Redis parses nothing else per call. One script is loaded per policy
// (and margin); the token and leaky buckets share their code. The script is
// p's head, the prelude, then p's body (see policyParts).
func scriptSource(p core.Policy, marginMs int64) string {
	head, body := policyParts(p, marginMs)
	return head + preludeLua + body
}

// batchSource returns the batch script of p (batch.lua): p's head, the
// clock, and p's algorithm as decide, exactly as in p's script, then the
// loop that makes a decision per key.
func batchSource(p core.Policy, marginMs int64) string {
	head, _ := policyParts(p, marginMs)
	return "-- batch\n" + head + clockLua + batchArg + decideLua(p) + batchLua
}

// algorithmLua returns p's algorithm's source.
func algorithmLua(p core.Policy) string {
	switch p.Algorithm {
	case core.FixedWindow:
		if p.Calendar != 0 {
			return calendarWindowLua
		}
		return fixedWindowLua
	case core.SlidingWindow:
		return slidingWindowLua
	case core.SlidingLog:
		return slidingLogLua
	}
	return gcraLua
}

// decideLua returns p's algorithm as the Lua function decide(KEYS, now,
// n, commit, elapsed, since), which returns the decision as five numbers
// (see clock.lua's answer), or 0 for a refund: its fast part, then the
// rest, as a batch script runs it for each of its decisions.
func decideLua(p core.Policy) string {
	fast, body := fastPart(algorithmLua(p))
	return convertLua + "local function decide(KEYS, now, n, commit, elapsed, since)\n" + freshLocals + fast +
		"if fresh then\n\treturn 1, fb, 0, fd, fe, true\nend\n" + body + "\nend\n"
}

// singleBody returns the body of p's script of one call (see policyParts):
// p's fast part, then decide, made only past it, with the fast part's pre.
func singleBody(p core.Policy) string {
	fast, body := fastPart(algorithmLua(p))
	return freshLocals + fast + singleFresh + convertLua +
		"local function decide(KEYS, now, n, commit, elapsed, since, pre)\n" + body + "\nend\n" + singleLua
}

// policyParts returns the two parts of p's script that are p's own: head,
// a comment naming the policy and its constants as Lua locals (margin,
// then the algorithm's), and body, the algorithm's code. A script puts the
// prelude between them; a layered script puts it once ahead of every
// layer's parts (see layeredSource).
func policyParts(p core.Policy, marginMs int64) (head, body string) {
	var consts string
	switch p.Algorithm {
	case core.FixedWindow, core.SlidingWindow:
		consts = fmt.Sprintf("local L, W = %d, %d\n", p.Limit, int64(p.Window.Microseconds()))
	case core.SlidingLog:
		w := int64(p.Window.Microseconds())
		consts = fmt.Sprintf("local L, W, wpx = %d, %d, '%d'\n", p.Limit, w, (w+999)/1000+marginMs)
	default:
		e := p.Emission()
		consts = fmt.Sprintf("local q, T, C, dcap, dmax, leaky = %d, %d, %d, %d, %d, %t\n",
			e.Scale, e.Interval, e.Capacity, maxBacklog, maxBacklog/e.Scale, p.Algorithm == core.LeakyBucket)
	}
	// keep: a named policy's state records what it was written under (see
	// policySegment); fmt is the windows' state format.
	keep := carries(p)
	switch {
	case p.Calendar != 0 && keep:
		consts += fmt.Sprintf("local fmt, CID = '>i8i8i8i8', %d\n", calendarID(p))
	case p.Calendar != 0:
		consts += "local fmt, CID = '>i8i8i8', 0\n"
	case p.Algorithm == core.FixedWindow && keep:
		consts += "local fmt = '>i8i8i8'\n"
	case p.Algorithm == core.FixedWindow:
		consts += "local fmt = '>i8i8'\n"
	case p.Algorithm == core.SlidingWindow && keep:
		consts += "local fmt = '>i8i8i8i8'\n"
	case p.Algorithm == core.SlidingWindow:
		consts += "local fmt = '>i8i8i8'\n"
	}
	body = singleBody(p)
	head = fmt.Sprintf("-- ratekit %v %d/%v burst %d\nlocal margin = %d\nlocal keep = %t\n",
		p.Algorithm, p.Limit, p.Window, p.Capacity(), marginMs, keep) + consts
	if p.Calendar != 0 {
		head = "-- calendar windows\n" + head
	}
	return head, body
}

// calendarID returns the id that a named calendar policy's states record
// (calendarwindow.lua): the FNV-1a hash, 32 bits, of its period and zone,
// "month@Europe/Berlin", so that a state written under another calendar
// is converted. (Two calendars of one hash would read each other's states
// as their own: one pair in 2^32.)
func calendarID(p core.Policy) int64 {
	h := fnv.New32a()
	h.Write([]byte(p.Calendar.String() + "@" + zoneName(p)))
	return int64(h.Sum32())
}
