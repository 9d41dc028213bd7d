package fiberlimit_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

func newApp(app *adaptertest.App) *fiber.App {
	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	// The test request's peer and context, which app.Test cannot carry.
	f.Use(func(c *fiber.Ctx) error {
		h := &c.Request().Header
		if peer := string(h.Peek(adaptertest.PeerHeader)); peer != "" {
			if addr, err := net.ResolveTCPAddr("tcp", peer); err == nil {
				c.Context().SetRemoteAddr(addr)
			}
		}
		if ctx := app.Context(string(h.Peek(adaptertest.ContextHeader))); ctx != nil {
			c.SetUserContext(ctx)
		}
		h.Del(adaptertest.PeerHeader)
		h.Del(adaptertest.ContextHeader)
		return c.Next()
	})
	if app.Use != nil {
		f.Use(fiberlimit.New(app.Use.Limiter, app.Use.Options...))
	}
	handle := func(c *fiber.Ctx) error {
		status, out := app.Handle(c.Get(adaptertest.StatusHeader), c.Body())
		c.Set("Content-Type", "text/plain")
		return c.Status(status).Send(out)
	}
	for _, rt := range app.Routes {
		var hs []fiber.Handler
		if rt.Limit != nil {
			hs = append(hs, fiberlimit.New(rt.Limit.Limiter, rt.Limit.Options...))
		}
		f.Add(rt.Method, adaptertest.ColonPattern(rt.Pattern), append(hs, handle)...)
	}
	return f
}

var driver = adaptertest.Driver{
	Name: "fiber",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		f := newApp(app)
		return func(r *http.Request) *http.Response {
			resp, err := f.Test(r, -1)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
	},
	Listen: func(t *testing.T, app *adaptertest.App) string {
		f := newApp(app)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- f.Listener(ln) }()
		t.Cleanup(func() {
			if err := f.Shutdown(); err != nil {
				t.Error(err)
			}
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		return "http://" + ln.Addr().String()
	},
}

func TestBehaviour(t *testing.T) { adaptertest.Run(t, driver) }

func TestEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, driver) }
