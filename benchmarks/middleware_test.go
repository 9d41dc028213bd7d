package benchmarks

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	ulule "github.com/ulule/limiter/v3"
	ulugin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ulumemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// Middleware cost: a hello-world route in each framework, bare, behind
// ratekit's middleware and behind the most used limiter of that framework,
// on the allowed path (1e9 requests a minute, one client IP, every request
// served). The cost of a middleware is its case minus "bare". Run with
//
//	go test -run=^$ -bench=Middleware -benchmem -count=10 -cpu=1 .
//
// Every middleware keys by the client IP and writes its default headers:
// ratekit the IETF RateLimit-Policy and RateLimit fields; httprate, ulule's
// gin driver and fiber's limiter X-RateLimit-*; echo's limiter none, which
// is why echo's cases also run ratekit without headers ("ratekit-no-headers").
// net/http routers (gin, chi, echo, the ServeMux) serve one reused request
// into a writer that discards the body; fiber serves one reused
// fasthttp.RequestCtx.

// openPerMinute is the limit of the middleware cases: every request allowed.
const openPerMinute = int(core.MaxLimit)

func openLimiter(b *testing.B) core.Limiter {
	l, err := core.New(core.Policy{Limit: core.MaxLimit, Window: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkMiddlewareGin is gin bare, with ginlimit and with ulule's gin
// driver (memory store).
func BenchmarkMiddlewareGin(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	hello := func(c *gin.Context) { c.String(200, "hello") }
	cases := map[string]func() gin.HandlerFunc{
		"bare":    nil,
		"ratekit": func() gin.HandlerFunc { return ginlimit.New(openLimiter(b)) },
		"ulule": func() gin.HandlerFunc {
			return ulugin.NewMiddleware(ulule.New(ulumemory.NewStore(), ulule.Rate{Period: time.Minute, Limit: int64(openPerMinute)}))
		},
	}
	for _, name := range []string{"bare", "ratekit", "ulule"} {
		b.Run(name, func(b *testing.B) {
			r := gin.New()
			if mw := cases[name]; mw != nil {
				r.Use(mw())
			}
			r.GET("/hello", hello)
			adaptertest.BenchHTTP(b, r)
		})
	}
}

// remoteIP keys httprate by the connection's address, as its deprecated
// LimitByIP did: the same key, spelled out.
func remoteIP(r *http.Request) (string, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(ip), nil
}

// BenchmarkMiddlewareChi is chi bare, with chilimit and with
// go-chi/httprate keyed by IP.
func BenchmarkMiddlewareChi(b *testing.B) {
	hello := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) }
	cases := map[string]func() func(http.Handler) http.Handler{
		"bare":     nil,
		"ratekit":  func() func(http.Handler) http.Handler { return chilimit.New(openLimiter(b)) },
		"httprate": func() func(http.Handler) http.Handler { return httprate.LimitBy(openPerMinute, time.Minute, remoteIP) },
	}
	for _, name := range []string{"bare", "ratekit", "httprate"} {
		b.Run(name, func(b *testing.B) {
			r := chi.NewRouter()
			if mw := cases[name]; mw != nil {
				r.Use(mw())
			}
			r.Get("/hello", hello)
			adaptertest.BenchHTTP(b, r)
		})
	}
}

// BenchmarkMiddlewareEcho is echo bare, with echolimit and with echo's
// built-in RateLimiter on its memory store.
func BenchmarkMiddlewareEcho(b *testing.B) {
	hello := func(c echo.Context) error { return c.String(200, "hello") }
	cases := map[string]func() echo.MiddlewareFunc{
		"bare":    nil,
		"ratekit": func() echo.MiddlewareFunc { return echolimit.New(openLimiter(b)) },
		"ratekit-no-headers": func() echo.MiddlewareFunc {
			return echolimit.New(openLimiter(b), httplimit.WithHeaders(httplimit.NoHeaders))
		},
		"echo": func() echo.MiddlewareFunc {
			return echomw.RateLimiter(echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{
				Rate: rate.Limit(float64(openPerMinute) / 60), Burst: openPerMinute,
			}))
		},
	}
	for _, name := range []string{"bare", "ratekit", "ratekit-no-headers", "echo"} {
		b.Run(name, func(b *testing.B) {
			e := echo.New()
			if mw := cases[name]; mw != nil {
				e.Use(mw())
			}
			e.GET("/hello", hello)
			adaptertest.BenchHTTP(b, e)
		})
	}
}

// BenchmarkMiddlewareFiber is fiber bare, with fiberlimit and with
// fiber's built-in limiter (fixed window, in-memory storage).
func BenchmarkMiddlewareFiber(b *testing.B) {
	hello := func(c *fiber.Ctx) error { return c.SendString("hello") }
	cases := map[string]func() fiber.Handler{
		"bare":    nil,
		"ratekit": func() fiber.Handler { return fiberlimit.New(openLimiter(b)) },
		"fiber": func() fiber.Handler {
			return fiberlimiter.New(fiberlimiter.Config{Max: openPerMinute, Expiration: time.Minute})
		},
	}
	for _, name := range []string{"bare", "ratekit", "fiber"} {
		b.Run(name, func(b *testing.B) {
			app := fiber.New()
			if mw := cases[name]; mw != nil {
				app.Use(mw())
			}
			app.Get("/hello", hello)
			benchFiber(b, app)
		})
	}
}

// BenchmarkMiddlewareHTTP is a plain net/http ServeMux bare, wrapped in
// httplimit.Middleware and in go-chi/httprate keyed by IP: middleware
// around the whole mux, as a server-wide limit is mounted (ratekit then
// asks the mux for the route too, see httplimit.Middleware).
func BenchmarkMiddlewareHTTP(b *testing.B) {
	hello := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) }
	cases := map[string]func() func(http.Handler) http.Handler{
		"bare":     nil,
		"ratekit":  func() func(http.Handler) http.Handler { return httplimit.Middleware(openLimiter(b)) },
		"httprate": func() func(http.Handler) http.Handler { return httprate.LimitBy(openPerMinute, time.Minute, remoteIP) },
	}
	for _, name := range []string{"bare", "ratekit", "httprate"} {
		b.Run(name, func(b *testing.B) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /hello", hello)
			var h http.Handler = mux
			if mw := cases[name]; mw != nil {
				h = mw()(mux)
			}
			adaptertest.BenchHTTP(b, h)
		})
	}
}
