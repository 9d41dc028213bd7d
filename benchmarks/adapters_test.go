package benchmarks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	tollbooth "github.com/didip/tollbooth/v7"
	tblimiter "github.com/didip/tollbooth/v7/limiter"
	"github.com/go-chi/httprate"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulumemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/ratekit/ratekit/core"
)

// Every library is driven through one adapter shape, allow(key) bool, built
// for one policy. The canonical policy is 100 requests per minute with a
// burst of 100; the correctness probes also build 1 per minute, burst 1.
//
// How each library expresses "limit per window, burst":
//
//   - ratekit: core.Policy{Limit: limit, Window: window, Burst: burst}, for
//     each algorithm (Burst is used by the token and leaky buckets only).
//   - x/time/rate: rate.NewLimiter(limit/window in events per second, burst),
//     one per key in a sync.Map (LoadOrStore, so a key gets one limiter).
//   - sethvargo/go-limiter memorystore: Tokens = limit per Interval = window;
//     its bucket holds Tokens, so the burst is the limit.
//   - ulule/limiter: Rate{Limit: limit, Period: window}, a fixed window that
//     starts at the key's first request; no separate burst (burst = limit).
//   - go-chi/httprate: NewRateLimiter(limit, window), a sliding-window
//     counter (two fixed windows weighted); no separate burst.
//   - throttled: GCRA, RateQuota{MaxRate: PerDuration(limit, window),
//     MaxBurst: burst-1}: throttled admits MaxBurst+1 at once.
//   - tollbooth: NewLimiter(limit/window per second) with SetBurst(burst),
//     an x/time/rate bucket per key in an expirable cache.
//   - echo: RateLimiterMemoryStoreConfig{Rate: limit/window per second,
//     Burst: burst}, an x/time/rate bucket per key.
//   - Redis (peers_redis_test.go): ratekit's redisstore token bucket,
//     redis_rate.Limit{Rate: limit, Period: window, Burst: burst}, ulule's
//     Redis store with the same Rate as its memory store.

// policy is the limit an adapter is built for: limit requests per window,
// with up to burst at once where the library has a burst.
type policy struct {
	limit  int
	window time.Duration
	burst  int
}

// canonical is the policy of every speed comparison: 100 per minute, burst 100.
var canonical = policy{limit: 100, window: time.Minute, burst: 100}

// perSecond is p's sustained rate in events per second.
func (p policy) perSecond() float64 { return float64(p.limit) / p.window.Seconds() }

// limiter is one library behind the common adapter shape.
type limiter struct {
	// allow reports whether one request for key is allowed now, counting it.
	allow func(key string) bool
	// keys reports how many keys the library holds, or is nil where the
	// library cannot tell.
	keys func() int
	// close releases the library's goroutines, or is nil. Callers close;
	// new must not use tb.Cleanup for it, because a benchmark runs its
	// cleanups after every b.N round and ManyKeys keeps one store across
	// rounds.
	close func()
}

// closeWith closes l when tb ends.
func (l limiter) closeWith(tb testing.TB) {
	if l.close != nil {
		tb.Cleanup(l.close)
	}
}

// peer is one library (and configuration) under comparison.
type peer struct {
	name string
	// new builds a fresh limiter for p; it uses tb only to fail.
	new func(tb testing.TB, p policy) limiter
}

// ratekitPeer is ratekit's memory store with algorithm a, on the system
// clock (as every peer is) and default options: the default MaxKeys
// (1<<20) holds the 1e6-key fixture without evicting.
func ratekitPeer(a core.Algorithm) peer {
	return peer{name: "ratekit-" + a.String(), new: func(tb testing.TB, p policy) limiter {
		cp := core.Policy{Algorithm: a, Limit: int64(p.limit), Window: p.window}
		if a == core.TokenBucket || a == core.LeakyBucket {
			cp.Burst = int64(p.burst) // the others reject a Burst
		}
		m, err := core.New(cp)
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		return limiter{
			allow: func(key string) bool {
				d, err := m.AllowN(ctx, key, 1)
				return err == nil && d.Allowed
			},
			keys: func() int { return m.Stats().Keys },
		}
	}}
}

// memoryPeers lists every in-memory library, ratekit's token bucket first
// (the reference of every ratio) and ratekit's other algorithms last.
func memoryPeers() []peer {
	peers := []peer{ratekitPeer(core.TokenBucket)}
	peers = append(peers,
		// x/time/rate has no key space: the usual pattern is one limiter
		// per key in a sync.Map (Load first, LoadOrStore on a miss so a
		// new key gets exactly one limiter). Nothing ever expires.
		peer{name: "x-time-rate", new: func(tb testing.TB, p policy) limiter {
			var m sync.Map
			every := rate.Limit(p.perSecond())
			return limiter{
				allow: func(key string) bool {
					v, ok := m.Load(key)
					if !ok {
						v, _ = m.LoadOrStore(key, rate.NewLimiter(every, p.burst))
					}
					return v.(*rate.Limiter).Allow()
				},
				keys: func() int {
					n := 0
					m.Range(func(_, _ any) bool { n++; return true })
					return n
				},
			}
		}},
		// sethvargo/go-limiter memorystore, defaults otherwise: the sweep
		// runs every 6 h (SweepInterval) and drops keys idle for 12 h
		// (SweepMinTTL), so it never runs during a benchmark, which the
		// docs say maximises throughput; InitialAlloc stays 4096 (the map
		// grows as needed; the 1e6 fixture is filled before the timer).
		peer{name: "sethvargo-go-limiter", new: func(tb testing.TB, p policy) limiter {
			s, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.limit), Interval: p.window})
			if err != nil {
				tb.Fatal(err)
			}
			ctx := context.Background()
			return limiter{
				allow: func(key string) bool {
					_, _, _, ok, err := s.Take(ctx, key)
					return err == nil && ok
				},
				close: func() { s.Close(ctx) },
			}
		}},
		// ulule/limiter with its memory store's defaults (memory.NewStore:
		// prefix "limiter", a cleaner every 30 s), as its README shows.
		peer{name: "ulule-limiter", new: func(tb testing.TB, p policy) limiter {
			l := ulule.New(ulumemory.NewStore(), ulule.Rate{Period: p.window, Limit: int64(p.limit)})
			ctx := context.Background()
			return limiter{allow: func(key string) bool {
				c, err := l.Get(ctx, key)
				return err == nil && !c.Reached
			}}
		}},
		// go-chi/httprate's in-memory counter, called through its public
		// RateLimiter.OnLimit (what its middleware calls) with the response
		// headers switched off, so no ResponseWriter work is counted.
		peer{name: "go-chi-httprate", new: func(tb testing.TB, p policy) limiter {
			rl := httprate.NewRateLimiter(p.limit, p.window, httprate.WithResponseHeaders(httprate.ResponseHeaders{}))
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			w := discard{}
			return limiter{allow: func(key string) bool { return !rl.OnLimit(w, req, key) }}
		}},
		// throttled's GCRA on its memstore with maxKeys 0: a plain map with
		// no LRU, its fastest documented configuration (an LRU bound takes
		// a global lock to move the key on every request). It never evicts.
		peer{name: "throttled", new: func(tb testing.TB, p policy) limiter {
			st, err := memstore.NewCtx(0)
			if err != nil {
				tb.Fatal(err)
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(p.limit, p.window), MaxBurst: p.burst - 1})
			if err != nil {
				tb.Fatal(err)
			}
			ctx := context.Background()
			return limiter{allow: func(key string) bool {
				limited, _, err := rl.RateLimitCtx(ctx, key, 1)
				return err == nil && !limited
			}}
		}},
		// tollbooth v7 (v8 is not served by this machine's module proxy):
		// Limiter.LimitReached, what LimitByKeys calls, without the key
		// join. The bucket TTL is the window: a bucket untouched that long
		// is full again, so expiring it changes no decision and holds the
		// least memory (the README's example uses an hour).
		peer{name: "tollbooth", new: func(tb testing.TB, p policy) limiter {
			lmt := tollbooth.NewLimiter(p.perSecond(), &tblimiter.ExpirableOptions{DefaultExpirationTTL: p.window})
			lmt.SetBurst(p.burst)
			return limiter{allow: func(key string) bool { return !lmt.LimitReached(key) }}
		}},
		// echo's RateLimiterMemoryStore (the store behind its built-in
		// RateLimiter middleware) with the default ExpiresIn (3 minutes).
		peer{name: "echo-memorystore", new: func(tb testing.TB, p policy) limiter {
			s := echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{Rate: rate.Limit(p.perSecond()), Burst: p.burst})
			return limiter{allow: func(key string) bool {
				ok, err := s.Allow(key)
				return err == nil && ok
			}}
		}},
	)
	for _, a := range core.Algorithms()[1:] {
		peers = append(peers, ratekitPeer(a))
	}
	return peers
}

// discard is a ResponseWriter that keeps nothing; its Header is nil, so
// it must not be used where headers are written.
type discard struct{}

func (discard) Header() http.Header         { return nil }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
