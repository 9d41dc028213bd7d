// Command ai is a token-metered chat endpoint, limited as an AI feature must
// be so that a free user cannot run up a bill: by the tokens each request
// really used, known only once the model answered, per plan, with at most
// two requests per user in flight.
//
//	go run ./examples/ai            # serve on 127.0.0.1:8080 (-addr to change)
//
// Callers send an API key in X-API-Key (demo-free, demo-pro) and a JSON
// body {"prompt": "...", "max_tokens": 200}:
//
//	curl -si -H 'X-API-Key: demo-free' -d '{"prompt":"hello there","max_tokens":200}' http://127.0.0.1:8080/v1/chat
//
// What it limits, all in httplimit.Middleware:
//
//   - Tokens per plan (a core.Tiered limiter): free 10,000 a day, pro
//     1,000,000 a day, as token buckets (a day's tokens refill
//     continuously, so a free user gets a token back every 8.64 s).
//   - Cost settled after the response (httplimit.WithSettle): a request is
//     counted at its estimate before the model runs (the prompt's tokens
//     plus max_tokens), and at the tokens the model reported after
//     (httplimit.SetCost). Using fewer gives the rest back; using more puts
//     the user into debt, which the next requests wait out exactly.
//   - In flight (httplimit.WithInFlight): at most 2 requests per user at
//     once, so that one user cannot hold every model worker.
//
// A client picks its own max_tokens, and so its estimate: one that asks for
// 1 token and uses 5,000 is charged 5,000 after, and is refused until the
// debt is repaid. An estimate above the plan's whole allowance is refused
// before the model runs (429, cost too high).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	fs := flag.NewFlagSet("ai", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	h, err := newServer(core.SystemClock{}, newAccounts(), echoModel{})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("ai: listening on http://%s (keys: demo-free, demo-pro)", *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// Plans: tokens a day per user.
var plans = map[string]core.Policy{
	"free": {Limit: 10_000, Window: 24 * time.Hour},
	"pro":  {Limit: 1_000_000, Window: 24 * time.Hour},
}

// maxInFlight is how many of a user's requests may run at once.
const maxInFlight = 2

// maxBody bounds a chat request's body.
const maxBody = 64 << 10

// account is who an API key belongs to.
type account struct {
	ID   string
	Plan string
}

// accounts maps API keys to accounts: a stand-in for your database.
type accounts struct {
	mu    sync.RWMutex
	byKey map[string]account
}

func newAccounts() *accounts {
	return &accounts{byKey: map[string]account{
		"demo-free": {"user-1", "free"},
		"demo-pro":  {"user-2", "pro"},
	}}
}

func (a *accounts) lookup(apiKey string) (account, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	acct, ok := a.byKey[apiKey]
	return acct, ok
}

// planOf returns the plan of the user with ID id.
func (a *accounts) planOf(_ context.Context, id string) (string, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, acct := range a.byKey {
		if acct.ID == id {
			return acct.Plan, nil
		}
	}
	return "", fmt.Errorf("ai: no user %q", id)
}

// chatRequest is the body of POST /v1/chat.
type chatRequest struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

// promptTokens counts a prompt's tokens as the model does: one per word
// (a real tokenizer counts pieces of words; any count the model reports
// works the same way here).
func promptTokens(prompt string) int64 { return int64(len(strings.Fields(prompt))) }

// estimate is what a request may cost at most: its prompt and every token
// it allows the answer.
func (c chatRequest) estimate() int64 { return promptTokens(c.Prompt) + c.MaxTokens }

// usage is what the model reports it spent.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// A model answers a chat request and reports its usage.
type model interface {
	Complete(ctx context.Context, req chatRequest) (string, usage, error)
}

// echoModel is a stand-in for a language model: it answers with the
// prompt's words repeated, up to max_tokens words.
type echoModel struct{}

func (echoModel) Complete(_ context.Context, req chatRequest) (string, usage, error) {
	words := strings.Fields(req.Prompt)
	var out []string
	for i := int64(0); i < req.MaxTokens && len(words) > 0; i++ {
		out = append(out, words[i%int64(len(words))])
	}
	u := usage{PromptTokens: int64(len(words)), CompletionTokens: int64(len(out))}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return strings.Join(out, " "), u, nil
}

// Context keys: the user's ID (the limits' key) and the parsed request.
type (
	userKey    struct{}
	requestKey struct{}
)

// newServer returns the API: authentication, then the limits, then the
// chat handler.
func newServer(clock core.Clock, accts *accounts, m model) (http.Handler, error) {
	tokens, err := core.NewTiered(plans, accts.planOf, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	inFlight, err := inflight.New(maxInFlight, inflight.WithClock(clock))
	if err != nil {
		return nil, err
	}
	limits := httplimit.Middleware(tokens,
		httplimit.WithKey(keyfunc.ContextValue(userKey{})),
		httplimit.WithCost(func(r keyfunc.Request) (int64, error) {
			return r.Context().Value(requestKey{}).(chatRequest).estimate(), nil
		}),
		httplimit.WithSettle(),
		httplimit.WithInFlight(inFlight),
		httplimit.WithClock(clock),
	)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat", authenticate(accts, limits(chat(m))))
	return mux, nil
}

// authenticate finds the caller's account by its API key and reads the
// chat request, so that the limits know who is asking and what it may
// cost before the model runs.
func authenticate(accts *accounts, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acct, ok := accts.lookup(r.Header.Get("X-API-Key"))
		if !ok {
			http.Error(w, "unknown API key", http.StatusUnauthorized)
			return
		}
		var req chatRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		switch {
		case err != nil:
			http.Error(w, "the body must be a JSON chat request: "+err.Error(), http.StatusBadRequest)
			return
		case req.MaxTokens < 1 || strings.TrimSpace(req.Prompt) == "":
			http.Error(w, "a chat request needs a prompt and max_tokens of at least 1", http.StatusBadRequest)
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), userKey{}, acct.ID), requestKey{}, req)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// chat runs the model and reports the tokens it used, the cost the limits
// settle the request at.
func chat(m model) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := r.Context().Value(requestKey{}).(chatRequest)
		answer, u, err := m.Complete(r.Context(), req)
		if err != nil {
			httplimit.SetCost(r.Context(), 0) // nothing was spent
			http.Error(w, "the model failed", http.StatusBadGateway)
			return
		}
		httplimit.SetCost(r.Context(), u.TotalTokens)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Answer string `json:"answer"`
			Usage  usage  `json:"usage"`
		}{answer, u})
	})
}
