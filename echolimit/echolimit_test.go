package echolimit_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/internal/bodytest"
	"github.com/ratekit/ratekit/keyfunc"
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
		if rt.Method == adaptertest.AnyMethod {
			e.Any(adaptertest.ColonPattern(rt.Pattern), handle, mw...)
		} else {
			e.Add(rt.Method, adaptertest.ColonPattern(rt.Pattern), handle, mw...)
		}
	}
	return adaptertest.Outer(app, e)
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

// TestBodyAfterDecompress keys a gzip body that echo's Decompress has
// already decoded, leaving Content-Encoding: gzip in place, by its email;
// a gzip bomb is still refused within the bound.
func TestBodyAfterDecompress(t *testing.T) {
	l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(middleware.Decompress())
	e.Use(echolimit.New(l, httplimit.WithKey(keyfunc.Email("email"))))
	e.POST("/login", func(c echo.Context) error {
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.Blob(http.StatusOK, "text/plain", body)
	})
	post := func(body []byte, encoding string) (int, []byte) {
		req := httptest.NewRequest("POST", "/login", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code, w.Body.Bytes()
	}
	json := adaptertest.JSONBody("ana@example.com", 0)
	if status, got := post(bodytest.Encode(t, json, "gzip"), "gzip"); status != http.StatusOK || !bytes.Equal(got, json) {
		t.Fatalf("gzip body: %d %q, want 200 and the decoded body", status, got)
	}
	if status, _ := post(json, ""); status != http.StatusTooManyRequests {
		t.Errorf("same email again: %d, want 429", status)
	}
	if status, _ := post(bodytest.GzipBomb(t, 1), "gzip"); status != http.StatusBadRequest {
		t.Errorf("gzip bomb: %d, want 400", status)
	}
}
