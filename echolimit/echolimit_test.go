package echolimit_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

func newApp(app *adaptertest.App) http.Handler {
	e := echo.New()
	if app.Use != nil {
		e.Use(echolimit.New(app.Use.Limiter, app.Use.Options...))
	}
	handle := func(c echo.Context) error {
		body, _ := io.ReadAll(c.Request().Body)
		status, out := app.Handle(c.Request().Header.Get(adaptertest.StatusHeader), body)
		return c.Blob(status, "text/plain", out)
	}
	for _, rt := range app.Routes {
		var mw []echo.MiddlewareFunc
		if rt.Limit != nil {
			mw = append(mw, echolimit.New(rt.Limit.Limiter, rt.Limit.Options...))
		}
		e.Add(rt.Method, adaptertest.ColonPattern(rt.Pattern), handle, mw...)
	}
	return e
}

var driver = adaptertest.Driver{
	Name: "echo",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		return adaptertest.Recorder(newApp(app))
	},
	Listen: func(t *testing.T, app *adaptertest.App) string { return adaptertest.Listen(t, newApp(app)) },
}

func TestBehaviour(t *testing.T) { adaptertest.Run(t, driver) }

func TestEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, driver) }
