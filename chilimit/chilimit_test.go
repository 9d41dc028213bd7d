package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

func newApp(app *adaptertest.App) http.Handler {
	r := chi.NewRouter()
	if app.Use != nil {
		r.Use(chilimit.New(app.Use.Limiter, app.Use.Options...))
	}
	for _, rt := range app.Routes {
		var router chi.Router = r
		if rt.Limit != nil {
			router = r.With(chilimit.New(rt.Limit.Limiter, rt.Limit.Options...))
		}
		if rt.Method == adaptertest.AnyMethod {
			router.Handle(rt.Pattern, app)
		} else {
			router.Method(rt.Method, rt.Pattern, app)
		}
	}
	return adaptertest.Outer(app, r)
}

var driver = adaptertest.Driver{
	Name: "chi",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		return adaptertest.Recorder(newApp(app))
	},
	Listen: func(t *testing.T, app *adaptertest.App) string { return adaptertest.Listen(t, newApp(app)) },
}

func TestBehaviour(t *testing.T) { adaptertest.Run(t, driver) }

func TestEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, driver) }
