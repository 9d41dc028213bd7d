package redisstore

import (
	_ "embed"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// The Lua sources. Each script is the prelude (exact integer helpers, the
// clock, the shared arguments) followed by one algorithm.
var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed gcra.lua
	gcraLua string
	//go:embed fixedwindow.lua
	fixedWindowLua string
	//go:embed slidingwindow.lua
	slidingWindowLua string
	//go:embed slidinglog.lua
	slidingLogLua string
)

// The scripts, one per algorithm; the token and leaky buckets share one.
var (
	gcraScript          = redis.NewScript(preludeLua + gcraLua)
	fixedWindowScript   = redis.NewScript(preludeLua + fixedWindowLua)
	slidingWindowScript = redis.NewScript(preludeLua + slidingWindowLua)
	slidingLogScript    = redis.NewScript(preludeLua + slidingLogLua)
)

// scriptFor returns the script that runs algorithm a.
func scriptFor(a core.Algorithm) *redis.Script {
	switch a {
	case core.FixedWindow:
		return fixedWindowScript
	case core.SlidingWindow:
		return slidingWindowScript
	case core.SlidingLog:
		return slidingLogScript
	}
	return gcraScript
}
