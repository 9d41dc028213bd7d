package keyfunc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"

	"github.com/ratekit/ratekit/keyfunc"
)

// Behind a load balancer, trust its network: the client is the rightmost
// X-Forwarded-For address that is not a proxy. A client that reaches the
// server directly is keyed by its socket address whatever it sends.
func ExampleClientIP() {
	clientIP, err := keyfunc.ClientIP(
		keyfunc.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")),
	)
	if err != nil {
		log.Fatal(err)
	}

	// Through the load balancer, which appended the address it saw.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:41000"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.7")
	fmt.Println(clientIP(keyfunc.FromHTTP(r)))

	// Directly, with a forged header.
	r = httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.7:52000"
	r.Header.Set("X-Forwarded-For", "1.2.3.4")
	fmt.Println(clientIP(keyfunc.FromHTTP(r)))
	// Output:
	// 203.0.113.7 <nil>
	// 198.51.100.7 <nil>
}

// Behind Cloudflare, name its header. It is read only from Cloudflare's
// addresses (two of its ranges here; use the full published list).
func ExampleTrustHeader() {
	clientIP, err := keyfunc.ClientIP(
		keyfunc.TrustProxies(
			netip.MustParsePrefix("173.245.48.0/20"),
			netip.MustParsePrefix("2400:cb00::/32"),
		),
		keyfunc.TrustHeader("CF-Connecting-IP"),
	)
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "173.245.48.10:443"
	r.Header.Set("CF-Connecting-IP", "203.0.113.7")
	fmt.Println(clientIP(keyfunc.FromHTTP(r)))
	// Output: 203.0.113.7 <nil>
}

// With proxies that write RFC 7239 Forwarded rather than X-Forwarded-For.
func ExampleUseForwarded() {
	clientIP, err := keyfunc.ClientIP(
		keyfunc.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")),
		keyfunc.UseForwarded(),
	)
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:41000"
	r.Header.Set("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`)
	fmt.Println(clientIP(keyfunc.FromHTTP(r)))
	// Output: 2001:db8:cafe::/64 <nil>
}

// IPv6 clients are keyed by their /64 network, which a single subscriber
// usually holds whole; IPv4 clients by their address.
func ExamplePeerIP() {
	for _, addr := range []string{"[2001:db8::1]:5000", "[2001:db8::ffff:1]:5001", "[2001:db8:0:1::1]:5002", "[::ffff:192.0.2.1]:5003"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		fmt.Println(keyfunc.PeerIP(keyfunc.FromHTTP(r)))
	}
	// Output:
	// 2001:db8::/64 <nil>
	// 2001:db8::/64 <nil>
	// 2001:db8:0:1::/64 <nil>
	// 192.0.2.1 <nil>
}

func ExampleHeader() {
	apiKey := keyfunc.Header("X-API-Key", []byte("a server-side secret"))

	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc")
	key, err := apiKey(keyfunc.FromHTTP(r))
	fmt.Println(strings.HasPrefix(key, "hmac:"), len(key), strings.Contains(key, "sk_live"), err)

	_, err = apiKey(keyfunc.FromHTTP(httptest.NewRequest("GET", "/", nil)))
	fmt.Println(errors.Is(err, keyfunc.ErrNoKey), err)
	// Output:
	// true 48 false <nil>
	// true keyfunc: no key: header X-API-Key missing
}

// Every request to a route shares its key: other IDs, a HEAD, a made-up
// method on a route that serves every method.
func ExampleRoute() {
	mux := http.NewServeMux()
	key := func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(keyfunc.Route(keyfunc.FromHTTP(r)))
	}
	mux.HandleFunc("GET /items/{id}", key)
	mux.HandleFunc("/any/{id}", key)
	for _, r := range []*http.Request{
		httptest.NewRequest("GET", "/items/42", nil),
		httptest.NewRequest("HEAD", "/items/43", nil),
		httptest.NewRequest("BREW", "/any/1", nil),
	} {
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// /items/{id} <nil>
	// /items/{id} <nil>
	// /any/{id} <nil>
}

// A limit per method: HEAD counts as GET, and methods outside the standard
// ones share one key.
func ExampleRouteMethod() {
	mux := http.NewServeMux()
	mux.HandleFunc("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(keyfunc.RouteMethod(keyfunc.FromHTTP(r)))
	})
	for _, m := range []string{"GET", "HEAD", "DELETE", "BREW", "get"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(m, "/items/1", nil))
	}
	// Output:
	// GET /items/{id} <nil>
	// GET /items/{id} <nil>
	// DELETE /items/{id} <nil>
	// * /items/{id} <nil>
	// * /items/{id} <nil>
}

// The email is read from a JSON body, which the handler still reads whole.
func ExampleEmail() {
	account := keyfunc.Email("email")

	r := httptest.NewRequest("POST", "/login", strings.NewReader(`{"email":" Ana@Example.COM ","password":"x"}`))
	r.Header.Set("Content-Type", "application/json")
	fmt.Println(account(keyfunc.FromHTTP(r)))

	body, _ := io.ReadAll(r.Body) // the handler
	fmt.Println(string(body))
	// Output:
	// ana@example.com <nil>
	// {"email":" Ana@Example.COM ","password":"x"}
}

func ExampleNormalizeEmail() {
	for _, s := range []string{
		" Ana@Example.COM ",
		"ＡＮＡ@example.com",
		"ana@bücher.de",
		"ana@xn--bcher-kva.de",
		"ana\u200b@example.com",
	} {
		key, err := keyfunc.NormalizeEmail(s)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(key)
	}
	// Output:
	// ana@example.com
	// ana@example.com
	// ana@xn--bcher-kva.de
	// ana@xn--bcher-kva.de
	// error: keyfunc: invalid key: email: control or format character U+200B
}

func ExampleFoldGmail() {
	fmt.Println(keyfunc.NormalizeEmail("A.na+promo@googlemail.com", keyfunc.FoldGmail()))
	fmt.Println(keyfunc.NormalizeEmail("A.na+promo@googlemail.com"))
	// Output:
	// ana@gmail.com <nil>
	// a.na+promo@googlemail.com <nil>
}

type userKey struct{}

// A user ID set by an authentication middleware.
func ExampleContextValue() {
	user := keyfunc.ContextValue(userKey{})

	r := httptest.NewRequest("GET", "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "u_123"))
	fmt.Println(user(keyfunc.FromHTTP(r)))
	// Output: u_123 <nil>
}

// Limit login attempts per account and client address together.
func ExampleJoin() {
	key := keyfunc.Join(keyfunc.Email("email"), keyfunc.PeerIP)

	r := httptest.NewRequest("POST", "/login", strings.NewReader("email=Ana%40Example.com&password=x"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "203.0.113.7:5000"
	fmt.Println(key(keyfunc.FromHTTP(r)))
	// Output: 15:ana@example.com11:203.0.113.7 <nil>
}

func ExamplePrefix() {
	key := keyfunc.Prefix("login", keyfunc.Email("email"))

	r := httptest.NewRequest("POST", "/login", strings.NewReader("email=ana%40example.com"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	fmt.Println(key(keyfunc.FromHTTP(r)))
	// Output: login:ana@example.com <nil>
}

// A router that keeps the route pattern elsewhere (chi, gin, echo) passes it
// with RouteFunc.
func ExampleFromHTTP() {
	type patternKey struct{}
	pattern := func(r *http.Request) string {
		p, _ := r.Context().Value(patternKey{}).(string)
		return p
	}

	r := httptest.NewRequest("DELETE", "/items/42", nil)
	r = r.WithContext(context.WithValue(r.Context(), patternKey{}, "/items/:id"))
	fmt.Println(keyfunc.Route(keyfunc.FromHTTP(r, keyfunc.RouteFunc(pattern))))
	// Output: /items/:id <nil>
}
