package ginlimit_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

func init() { gin.SetMode(gin.ReleaseMode) }

func newApp(app *adaptertest.App) http.Handler {
	r := gin.New()
	if app.Use != nil {
		r.Use(ginlimit.New(app.Use.Limiter, app.Use.Options...))
	}
	handle := func(c *gin.Context) {
		body, _ := io.ReadAll(c.Request.Body)
		status, out := app.Handle(c.GetHeader(adaptertest.StatusHeader), body)
		c.Data(status, "text/plain", out)
	}
	for _, rt := range app.Routes {
		var hs []gin.HandlerFunc
		if rt.Limit != nil {
			hs = append(hs, ginlimit.New(rt.Limit.Limiter, rt.Limit.Options...))
		}
		if rt.Method == adaptertest.AnyMethod {
			r.Any(adaptertest.ColonPattern(rt.Pattern), append(hs, handle)...)
		} else {
			r.Handle(rt.Method, adaptertest.ColonPattern(rt.Pattern), append(hs, handle)...)
		}
	}
	return adaptertest.Outer(app, r)
}

var driver = adaptertest.Driver{
	Name: "gin",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		return adaptertest.Recorder(newApp(app))
	},
	Listen: func(t *testing.T, app *adaptertest.App) string { return adaptertest.Listen(t, newApp(app)) },
}

func TestBehaviour(t *testing.T) { adaptertest.Run(t, driver) }

func TestEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, driver) }
