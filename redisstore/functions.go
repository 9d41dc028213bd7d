package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Redis Functions.
//
// On Redis 7 and later a limiter calls each script as a Redis Function
// (FCALL) rather than by EVALSHA: the same code, the same arguments, the
// same replies, the same keys and writes, so a limiter on FCALL and one on
// EVALSHA agree on every key, and either can follow the other. What a
// function saves is what Redis pays per EVALSHA ahead of the script's own
// work (about 1,900 instructions), and what a script pays per call in the
// EVAL environment: there every name such as floor or struct.pack is
// looked up, the policy's constants and changedAt made, and every number
// passed to redis.call formatted by "%.17g", on every call; in a library
// the names are looked up once and kept as upvalues, the constants made
// when it loads, and the last number formatted kept with its decimal
// string, as is the last new state a window packed (clock.lua). Measured
// with callgrind on Redis 7.0 (benchmarks' TestCallgrind), a decision on a
// new key costs Redis about 14% fewer instructions in a window or a token
// bucket, 11% in a leaky bucket or a sliding log; a batch's decision 5 to
// 9% fewer.
//
// Each script is its own library, named after the SHA-1 of its code,
// "ratekit_<sha1>", with one function of that name: two ratekit versions
// whose scripts differ load libraries of different names, and never
// replace each other's. A policy's constants stay written into its code
// (see scripts.go): passing them as an argument instead, one library for
// every policy of an algorithm, measured about 2,000 instructions a call
// more, which puts the windows above ulule/limiter's INCRBY script. So a
// library is loaded per policy, as a script is; unlike a script it is
// kept by RDB and AOF and replicated. Deleting a library (FUNCTION
// DELETE, FUNCTION FLUSH) is always safe: a call that finds its function
// missing loads it and calls again.
//
// How a limiter calls (fmode): New and SetPolicy load the policy's
// libraries, on every master of a Cluster (a Ring: every shard). If every
// load succeeds (or finds the library there), the limiter calls FCALL; if
// Redis refuses one (an unknown command, before Redis 7; an ACL without
// FUNCTION; a managed Redis that disables it), it calls EVALSHA from then
// on, as before. If Redis cannot be reached, it calls EVALSHA, and the
// first NOSCRIPT, which then follows, tries the load again. A call answered
// "Function not found" (a restart without persistence, FUNCTION FLUSH, a
// failover to a replica that lacks it, a new master after resharding)
// loads the library on every master and is sent once more, as NOSCRIPT
// makes a call be sent again as EVAL; one answered that FCALL is unknown or
// not permitted is sent again by EVAL, and the limiter calls EVALSHA from
// then on. Neither ran: nothing is counted twice.
//
// A function differs from its EVAL in one way a caller can see: Redis
// refuses a function that may write while it is out of memory (maxmemory
// with noeviction), before it runs, where the script ran until its first
// write: a denial or a Peek answered then, and now fails as an allowed
// decision did.

// How a limiter calls its scripts (Limiter.fmode).
const (
	modeUnknown   int32 = iota // not known yet: EVALSHA, and a load is tried on NOSCRIPT
	modeFunctions              // FCALL
	modeScripts                // EVALSHA: Redis refused FUNCTION
)

// functionHead starts every library, ahead of its script's constants (see
// libraryOf): it keeps the names the script reads from the globals, read
// at the library's first call (a library's code may not read them while
// it loads), and clock.lua's definitions, which the script then omits.
// TestFunctionClock holds them to clock.lua's.
const functionHead = `local register = redis.register_function
local function globals()
	return redis, math, string, struct, table, tonumber, tostring, type, pcall, unpack
end
local redis, math, string, struct, table, tonumber, tostring, type, pcall, unpack
local floor, ceil, byte, bpack, bunpack
local answer = '>i8i8i8i8i8'
local newset = true
local fwi, fwn, fww, fwf, fws
local swi, swn, sww, swf, sws
local lastx, lasts
local function arg(x)
	if x ~= lastx then
		lastx, lasts = x, string.format('%d', x)
	end
	return lasts
end
`

// functionRun starts a library's function, after its constants.
const functionRun = `local function run(KEYS, ARGV)
if not floor then
	redis, math, string, struct, table, tonumber, tostring, type, pcall, unpack = globals()
	floor, ceil, byte = math.floor, math.ceil, string.byte
	bpack, bunpack = struct.pack, struct.unpack
end
`

// versionCheck is the scripts' test for Redis before 5 (prelude.lua,
// batch.lua), which a function, on Redis 7 or later, omits.
const versionCheck = "\tif not redis.REDIS_VERSION_NUM and redis.replicate_commands then\n\t\tredis.replicate_commands()\n\tend\n"

// libraryOf returns the library of a script whose source is src, and its
// function's name, or two empty strings for a script without clock.lua
// (inflight.lua), which has no library: it runs by EVALSHA. What src has ahead of clock.lua, the policy's
// constants (or a comment), is the library's, made once when it loads,
// and so is convert.lua's changedAt; the rest, less the test of versions
// before 7 and the script's own arg (see functionHead), is the function's.
// (Measured, constants within the function cost Redis some 800
// instructions a call more.)
func libraryOf(src string) (name, code string) {
	i := strings.Index(src, clockLua)
	if i < 0 {
		return "", ""
	}
	consts, body := src[:i], src[i+len(clockLua):]
	body = strings.ReplaceAll(body, versionCheck, "")
	body = strings.Replace(body, "local arg = tonumber\n", "", 1)
	body = strings.Replace(body, batchArg, "", 1)
	body = strings.ReplaceAll(body, convertLua, "")
	lib := functionHead + consts + convertLua + functionRun + body + "\nend\n"
	sum := sha1.Sum([]byte(lib))
	name = "ratekit_" + hex.EncodeToString(sum[:])
	return name, "#!lua name=" + name + "\n" + lib + "register('" + name + "', run)\n"
}

// A script's forms, by either name: its SHA-1 (EVALSHA) and its
// function's (FCALL).
type scriptForms struct {
	src  string // the EVAL source
	sha  string
	fn   string // the function's name, which is its library's
	code string // the library's code
}

// forms holds the scriptForms of every script, by SHA-1 and by function
// name (see scriptFor).
var forms sync.Map // string → *scriptForms

// formsOf returns the forms of the script that id, a SHA-1 or a function
// name that scriptFor made, names, or nil.
func formsOf(id any) *scriptForms {
	if f, ok := forms.Load(id); ok {
		return f.(*scriptForms)
	}
	return nil
}

// functionName returns the function of script s, which scriptFor returned.
func functionName(s *redis.Script) string {
	return formsOf(s.Hash()).fn
}

// The commands of a call, boxed once: a string made an interface value
// where it is not a constant is allocated.
var fcallVerb, evalshaVerb any = "fcall", "evalsha"

// verb returns the command and the script's name of a call: FCALL and fn
// when the limiter calls functions, else EVALSHA and sha.
func (l *Limiter) verb(sha, fn any) (any, any) {
	if l.fmode.Load() == modeFunctions {
		return fcallVerb, fn
	}
	return evalshaVerb, sha
}

// loadFunctions loads the libraries of fs on every master and reports
// whether the limiter calls functions now: if Redis refused one, it calls
// EVALSHA from then on; if it could not be reached, nothing changes.
func (l *Limiter) loadFunctions(ctx context.Context, fs ...*scriptForms) bool {
	if l.fmode.Load() == modeScripts {
		return false
	}
	for _, f := range fs {
		if f == nil || f.fn == "" {
			return false // a script without a library: EVALSHA
		}
	}
	err := l.eachMaster(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		for _, f := range fs {
			err := c.FunctionLoad(ctx, f.code).Err()
			if err != nil && !strings.Contains(err.Error(), "already exists") {
				return err
			}
		}
		return nil
	})
	var reply redis.Error
	switch {
	case err == nil:
		l.fmode.CompareAndSwap(modeUnknown, modeFunctions)
	case errors.As(err, &reply) && !topologyError(err):
		// Redis answered, and refused: an unknown command, NOPERM, a
		// managed Redis's own refusal.
		l.fmode.Store(modeScripts)
	}
	return l.fmode.Load() == modeFunctions
}

// eachMaster runs fn on every master of l's client: each master of a
// Cluster, each shard of a Ring, or the client itself.
func (l *Limiter) eachMaster(ctx context.Context, fn func(context.Context, redis.UniversalClient) error) error {
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return fn(ctx, m) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error { return fn(ctx, m) })
	}
	return fn(ctx, l.client)
}

// isFunctionNotFound reports whether err is FCALL's answer for a function
// the server lacks: nothing ran.
func isFunctionNotFound(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "Function not found") // (less "ERR ")
}

// isFunctionRefused reports whether err is the answer of a server that
// does not run FCALL for this client: an unknown command (before Redis 7,
// or renamed away) or an ACL that does not permit it. Nothing ran.
func isFunctionRefused(err error) bool {
	if err == nil {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	m := strings.ToLower(err.Error())
	return strings.HasPrefix(m, "err unknown command") || strings.HasPrefix(m, "noperm") && strings.Contains(m, "fcall")
}

// retry is what a batch's commands answered that way share: the libraries
// loaded once for all of them.
type retry struct {
	loaded map[string]bool // function name → loaded
}

// again returns the command to send in place of cmd, a script's call that
// err answered without running it, or nil: the EVAL of its source after
// NOSCRIPT (or, if the limiter's libraries load, its FCALL), its FCALL
// again once its library is loaded, or its EVAL if Redis refuses FCALL. r,
// if not nil, keeps the loads made for a batch's other commands.
func (l *Limiter) again(ctx context.Context, cmd redis.Cmder, err error, r *retry) redis.Cmder {
	a := cmd.Args()
	if len(a) < 2 {
		return nil
	}
	f := formsOf(a[1])
	switch {
	case isNoScript(err):
		if f != nil && f.fn != "" && l.fmode.Load() == modeUnknown && l.load1(ctx, f, r) {
			return redo(ctx, cmd, "fcall", f.fn)
		}
		return redo(ctx, cmd, "eval", sourceOf(a[1]))
	case a[0] != "fcall" || f == nil || f.fn == "":
		return nil
	case isFunctionNotFound(err):
		if l.load1(ctx, f, r) {
			return redo(ctx, cmd, "fcall", f.fn)
		}
		return redo(ctx, cmd, "eval", f.src)
	case isFunctionRefused(err):
		l.fmode.Store(modeScripts)
		return redo(ctx, cmd, "eval", f.src)
	}
	return nil
}

// load1 loads f's library, once for a batch's commands (r), and reports
// whether the limiter calls functions.
func (l *Limiter) load1(ctx context.Context, f *scriptForms, r *retry) bool {
	if r == nil {
		return l.loadFunctions(ctx, f)
	}
	if ok, done := r.loaded[f.fn]; done {
		return ok
	}
	if r.loaded == nil {
		r.loaded = make(map[string]bool)
	}
	ok := l.loadFunctions(ctx, f)
	r.loaded[f.fn] = ok
	return ok
}

// redo returns a command of cmd's type and arguments but the first two,
// verb and id.
func redo(ctx context.Context, cmd redis.Cmder, verb string, id any) redis.Cmder {
	args := append([]any(nil), cmd.Args()...)
	args[0], args[1] = verb, id
	if _, ok := cmd.(*redis.StringCmd); ok {
		return redis.NewStringCmd(ctx, args...)
	}
	return redis.NewCmd(ctx, args...)
}
