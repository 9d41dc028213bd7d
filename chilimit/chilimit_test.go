package chilimit_test

import (
	"io"
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
	handle := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		status, out := app.Handle(r.Header.Get(adaptertest.StatusHeader), body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		w.Write(out)
	})
	for _, rt := range app.Routes {
		if rt.Limit != nil {
			r.With(chilimit.New(rt.Limit.Limiter, rt.Limit.Options...)).Method(rt.Method, rt.Pattern, handle)
		} else {
			r.Method(rt.Method, rt.Pattern, handle)
		}
	}
	return r
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
