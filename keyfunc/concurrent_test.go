package keyfunc

import (
	"net/http"
	"sync"
	"testing"
)

// TestFuncsConcurrent runs every key function from several goroutines at
// once on one Func value (run with -race): Funcs hold no per-request state.
func TestFuncsConcurrent(t *testing.T) {
	clientIP := mustClientIP(t, TrustProxies(testProxies...), TrustHeader("X-Real-IP"))
	fns := map[string]Func{
		"ClientIP": clientIP,
		"Header":   Header("X-API-Key", []byte("secret")),
		"Email":    Email("email", FoldGmail()),
		"Route":    Route,
		"Join":     Prefix("ns", Join(clientIP, Header("X-API-Key", nil), Email("email"))),
	}
	want := map[string]string{}
	newRequest := func() *fakeRequest {
		return &fakeRequest{
			remote: "10.0.0.1:80",
			header: http.Header{"X-Forwarded-For": {"6.6.6.6, 203.0.113.7"}, "X-Api-Key": {"k"}},
			method: "GET",
			route:  "/items/{id}",
			fields: map[string]string{"email": "A.na@GMAIL.com"},
		}
	}
	for name, fn := range fns {
		k, err := fn(newRequest())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want[name] = k
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 100 {
				for name, fn := range fns {
					if k, err := fn(newRequest()); k != want[name] || err != nil {
						t.Errorf("%s = %q, %v; want %q", name, k, err, want[name])
						return
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
}
