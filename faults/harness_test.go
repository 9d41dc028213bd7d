package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

// Config is one run's traffic and limiter settings. The zero value of a
// field means the default given in its comment.
type Config struct {
	// Limit is the fixed window's limit per key per Window. Default: 20.
	Limit int64
	// Window is the fixed window. Default: 100 ms.
	Window time.Duration
	// Instances is the number of gateways sharing Redis, each with its own
	// client, Failover and local limiter of Limit ÷ Instances. Default: 2.
	Instances int
	// Workers is the number of goroutines per instance. Default: 2.
	Workers int
	// Keys is the number of keys each failure mode's traffic spreads over.
	// Default: 3.
	Keys int
	// Pace is the pause of each worker between two decisions. Default: 1 ms.
	Pace time.Duration
	// RemoteTimeout is the Failover's WithTimeout. Default: 100 ms.
	RemoteTimeout time.Duration
	// CoolDown is the breaker's cool-down (WithBreaker(3, CoolDown)).
	// Default: 500 ms.
	CoolDown time.Duration
	// Warm is the time traffic runs before the fault. Default: 300 ms.
	Warm time.Duration
	// Fault is the time the fault lasts. Default: 1 s.
	Fault time.Duration
	// After is the time traffic runs after every instance has decided on
	// Redis again. Default: 300 ms. Traffic stops at the latest CoolDown +
	// 10 s after the fault ends, recovered or not.
	After time.Duration
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Limit == 0 {
		c.Limit = 20
	}
	if c.Instances == 0 {
		c.Instances = 2
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Keys == 0 {
		c.Keys = 3
	}
	def(&c.Window, 100*time.Millisecond)
	def(&c.Pace, time.Millisecond)
	def(&c.RemoteTimeout, 100*time.Millisecond)
	def(&c.CoolDown, 500*time.Millisecond)
	def(&c.Warm, 300*time.Millisecond)
	def(&c.Fault, time.Second)
	def(&c.After, 300*time.Millisecond)
	return c
}

// Fault is one fault: Inject starts it and Heal ends it. Either may be nil.
type Fault struct {
	Name   string
	Inject func(ctx context.Context) error
	Heal   func(ctx context.Context) error
}

// Mode is a Failover's error policy in a run.
type Mode string

// The failure modes every run drives, side by side, on separate keys.
const (
	FailClosed Mode = "fail-closed" // core.FailClosed()
	Fallback   Mode = "fallback"    // core.Fallback(a local core.Memory of Limit ÷ Instances)
)

// Report is what one failure mode's limiters did in a run.
type Report struct {
	Fault string
	Mode  Mode
	// Decisions is the number of decisions made; ByRedis were made by
	// Redis, ByFailureMode by the error policy (the breaker open, or an
	// outage: an error or RemoteTimeout).
	Decisions, ByRedis, ByFailureMode int
	// DuringFault is the share of the decisions started while the fault
	// lasted that the failure mode made.
	DuringFault float64
	// Errors is the number of errors returned to the caller, but the
	// refusals of FailClosed (core.UnavailableError).
	Errors int
	// Slowest is the longest decision.
	Slowest time.Duration
	// Recovery is the time from the fault's end until every instance had
	// a decision made by Redis; KeyRecovery, per key, until every instance
	// had one on that key. Recovered is false if an instance had none on
	// some key by the end of the run.
	Recovery    time.Duration
	KeyRecovery map[string]time.Duration
	Recovered   bool
	// OverAdmitted is the units allowed above Limit, summed over every key
	// and window; WorstWindow is the most units allowed in one key's window.
	OverAdmitted, WorstWindow int64
	// Allowed is the units allowed per key and window (counted from 0, the
	// window the run started in).
	Allowed map[string]map[int64]Units
	// BreakerOpened and BreakerClosed count the breakers' transitions.
	BreakerOpened, BreakerClosed int
	// StoreErrors is the number of outage errors the Failovers met, and
	// FirstStoreError the first.
	StoreErrors     int
	FirstStoreError string
}

// Units is what was allowed in one key's window: every unit, and those
// Redis allowed.
type Units struct{ All, ByRedis int64 }

// String formats the report on one line.
func (r Report) String() string {
	rec := r.Recovery.Round(time.Millisecond).String()
	if !r.Recovered {
		rec = "not recovered"
	}
	return fmt.Sprintf("%s/%s: %d decisions, %d by Redis, %d by the failure mode (%.0f%% during the fault), %d errors, slowest %v, Redis again after %s, over-admitted %d (worst window %d), breaker opened %d closed %d, store errors %d",
		r.Fault, r.Mode, r.Decisions, r.ByRedis, r.ByFailureMode, 100*r.DuringFault, r.Errors,
		r.Slowest.Round(100*time.Microsecond), rec, r.OverAdmitted, r.WorstWindow, r.BreakerOpened, r.BreakerClosed, r.StoreErrors)
}

// byRedis marks, through the context, a decision the remote limiter made.
type byRedis struct{ ok bool }

type recKey struct{}

// remote wraps the Redis limiter to tell the harness which decisions it
// made; it keeps the policy visible to the Failover.
type remote struct{ *redisstore.Limiter }

func (r remote) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	d, err := r.Limiter.AllowN(ctx, key, n)
	if rec, ok := ctx.Value(recKey{}).(*byRedis); ok && err == nil {
		rec.ok = true
	}
	return d, err
}

// gate is the manual clock of a run's windows: workers decide under its read
// lock, so each decision's window is known exactly; the clock moves one
// window at a time under its write lock.
type gate struct {
	mu     sync.RWMutex
	clock  *core.ManualClock
	window int64
}

// modeRun is one failure mode's limiters and tallies.
type modeRun struct {
	mode      Mode
	failovers []*core.Failover
	cfg       Config

	mu          sync.Mutex
	rep         Report
	allowed     map[string]map[int64]Units // key → window → units allowed
	faultTotal  int
	faultByMode int
	firstRedis  []map[string]time.Time // per instance and key, the first Redis decision started after the heal, when it ended
}

// NewClient makes the Redis client of one instance of a run, from the
// run's settings with their defaults; the run closes it.
type NewClient func(cfg Config) redis.UniversalClient

// Node returns the [NewClient] of a single node at addr: the settings
// redisstore recommends (MaxRetries -1, ContextTimeoutEnabled), a
// DialTimeout of RemoteTimeout and two connections per worker.
func Node(addr string) NewClient {
	return func(cfg Config) redis.UniversalClient {
		return redis.NewClient(&redis.Options{
			Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
			DialTimeout: cfg.RemoteTimeout, PoolSize: 2 * cfg.Workers,
		})
	}
}

// Cluster returns the [NewClient] of a Redis Cluster reached through any
// of addrs, with [Node]'s settings and MaxRedirects -1 (a command of
// unknown outcome is never sent again).
func Cluster(addrs ...string) NewClient {
	return func(cfg Config) redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, MaxRetries: -1, MaxRedirects: -1, ContextTimeoutEnabled: true,
			DialTimeout: cfg.RemoteTimeout, PoolSize: 2 * cfg.Workers,
		})
	}
}

// Sentinel returns the [NewClient] of the master that the Sentinels at
// addrs call master (redis.NewFailoverClient), with [Node]'s settings.
func Sentinel(master string, addrs ...string) NewClient {
	return func(cfg Config) redis.UniversalClient {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: master, SentinelAddrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true,
			DialTimeout: cfg.RemoteTimeout, PoolSize: 2 * cfg.Workers,
		})
	}
}

// Run is [RunClients] with the clients of a single node at addr
// (typically a [Proxy]'s); see [Node].
func Run(ctx context.Context, addr string, cfg Config, fault Fault) ([]Report, error) {
	return RunClients(ctx, Node(addr), cfg, fault)
}

// RunClients starts traffic through Failovers of a redisstore fixed-window
// limiter, one set per [Mode], each instance on a long-lived client made by
// newClient, injects fault after cfg.Warm, heals it after cfg.Fault, and
// returns one [Report] per mode. Every wait is bounded; ctx ends the run
// early.
func RunClients(ctx context.Context, newClient NewClient, cfg Config, fault Fault) ([]Report, error) {
	cfg = cfg.withDefaults()
	policy := core.Policy{Algorithm: core.FixedWindow, Limit: cfg.Limit, Window: cfg.Window}
	local := core.Policy{Algorithm: core.FixedWindow, Limit: max(cfg.Limit/int64(cfg.Instances), 1), Window: cfg.Window}
	w := cfg.Window
	start := time.Now().Truncate(w).Add(w / 2)
	g := &gate{clock: core.NewManualClock(start)}

	var clients []redis.UniversalClient
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	var runs []*modeRun
	for _, mode := range []Mode{FailClosed, Fallback} {
		m := &modeRun{mode: mode, cfg: cfg, allowed: make(map[string]map[int64]Units),
			firstRedis: make([]map[string]time.Time, cfg.Instances)}
		m.rep.Fault, m.rep.Mode = fault.Name, mode
		for i := range cfg.Instances {
			m.firstRedis[i] = make(map[string]time.Time)
			c := newClient(cfg)
			clients = append(clients, c)
			rl, err := redisstore.New(c, policy, redisstore.WithClock(g.clock), redisstore.WithPrefix("faults"))
			if err != nil {
				return nil, fmt.Errorf("faults: %w", err)
			}
			ep := core.FailClosed()
			if mode == Fallback {
				lm, err := core.New(local, core.WithClock(g.clock))
				if err != nil {
					return nil, fmt.Errorf("faults: %w", err)
				}
				ep = core.Fallback(lm)
			}
			f, err := core.NewFailover(remote{rl}, core.WithErrorPolicy(ep),
				core.WithTimeout(cfg.RemoteTimeout), core.WithBreaker(3, cfg.CoolDown),
				core.WithBreakerHook(m.breaker), core.WithErrorHook(m.storeError))
			if err != nil {
				return nil, fmt.Errorf("faults: %w", err)
			}
			m.failovers = append(m.failovers, f)
		}
		runs = append(runs, m)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		phase    atomic.Int32 // 0 warm, 1 fault, 2 after
		healedAt atomic.Int64 // Unix ns
		wg       sync.WaitGroup
	)
	// The clock: one window per Window of real time, each decision in the
	// middle of its window.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(w)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.mu.Lock()
				g.window++
				g.clock.Set(start.Add(time.Duration(g.window) * w))
				g.mu.Unlock()
			}
		}
	}()
	for _, m := range runs {
		for i := range m.failovers {
			for j := range cfg.Workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.work(ctx, g, i, j, &phase, &healedAt)
				}()
			}
		}
	}

	runErr := func() error {
		if err := sleep(ctx, cfg.Warm); err != nil {
			return err
		}
		phase.Store(1)
		if fault.Inject != nil {
			if err := fault.Inject(ctx); err != nil {
				return fmt.Errorf("inject: %w", err)
			}
		}
		if err := sleep(ctx, cfg.Fault); err != nil {
			return err
		}
		if fault.Heal != nil {
			if err := fault.Heal(ctx); err != nil {
				return fmt.Errorf("heal: %w", err)
			}
		}
		healedAt.Store(time.Now().UnixNano())
		phase.Store(2)
		deadline := time.Now().Add(cfg.CoolDown + 10*time.Second)
		for time.Now().Before(deadline) {
			if runs[0].recovered() && runs[1].recovered() {
				break
			}
			if err := sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
		return sleep(ctx, cfg.After)
	}()
	cancel()
	wg.Wait()
	if runErr != nil {
		return nil, fmt.Errorf("faults: %s: %w", fault.Name, runErr)
	}
	healed := time.Unix(0, healedAt.Load())
	var reps []Report
	for _, m := range runs {
		reps = append(reps, m.report(healed))
	}
	return reps, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *modeRun) breaker(open bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if open {
		m.rep.BreakerOpened++
	} else {
		m.rep.BreakerClosed++
	}
}

func (m *modeRun) storeError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rep.StoreErrors == 0 {
		m.rep.FirstStoreError = err.Error()
	}
	m.rep.StoreErrors++
}

func (m *modeRun) recovered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, byKey := range m.firstRedis {
		if len(byKey) < m.cfg.Keys {
			return false
		}
	}
	return true
}

// key returns the n-th key of the mode's traffic.
func (m *modeRun) key(n int) string { return fmt.Sprintf("%s-k%d", m.mode, n%m.cfg.Keys) }

// work is one worker of instance i: a decision on its next key every Pace
// until ctx ends.
func (m *modeRun) work(ctx context.Context, g *gate, i, j int, phase *atomic.Int32, healedAt *atomic.Int64) {
	f := m.failovers[i]
	for n := j; ctx.Err() == nil; n++ {
		key := m.key(n)
		ph := phase.Load()
		rec := &byRedis{}
		dctx, cancel := context.WithTimeout(context.WithValue(ctx, recKey{}, rec), 10*time.Second)
		g.mu.RLock()
		window := g.window
		t0 := time.Now()
		d, err := f.AllowN(dctx, key, 1)
		took := time.Since(t0)
		g.mu.RUnlock()
		cancel()
		if ctx.Err() != nil {
			return // the run ended during the decision: not counted
		}
		end := time.Now()
		m.mu.Lock()
		m.rep.Decisions++
		m.rep.Slowest = max(m.rep.Slowest, took)
		// A refusal of FailClosed is an UnavailableError: the failure
		// mode's decision, not an error of the harness.
		var refused *core.UnavailableError
		byMode := errors.As(err, &refused) || err == nil && !rec.ok
		switch {
		case byMode:
			m.rep.ByFailureMode++
		case err != nil:
			m.rep.Errors++
		default:
			m.rep.ByRedis++
		}
		if ph == 1 {
			m.faultTotal++
			if byMode {
				m.faultByMode++
			}
		}
		if err == nil && d.Allowed {
			byWin := m.allowed[key]
			if byWin == nil {
				byWin = make(map[int64]Units)
				m.allowed[key] = byWin
			}
			u := byWin[window]
			u.All++
			if rec.ok {
				u.ByRedis++
			}
			byWin[window] = u
		}
		if h := healedAt.Load(); rec.ok && h != 0 && t0.UnixNano() >= h {
			if _, ok := m.firstRedis[i][key]; !ok {
				m.firstRedis[i][key] = end
			}
		}
		m.mu.Unlock()
		if sleep(ctx, m.cfg.Pace) != nil {
			return
		}
	}
}

func (m *modeRun) report(healed time.Time) Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rep
	if m.faultTotal > 0 {
		r.DuringFault = float64(m.faultByMode) / float64(m.faultTotal)
	}
	r.Recovered = true
	r.KeyRecovery = make(map[string]time.Duration)
	for _, byKey := range m.firstRedis {
		if len(byKey) < m.cfg.Keys {
			r.Recovered = false
		}
		first := time.Time{} // the instance's first Redis decision on any key
		for key, t := range byKey {
			r.KeyRecovery[key] = max(r.KeyRecovery[key], t.Sub(healed))
			if first.IsZero() || t.Before(first) {
				first = t
			}
		}
		if !first.IsZero() {
			r.Recovery = max(r.Recovery, first.Sub(healed))
		}
	}
	r.Allowed = make(map[string]map[int64]Units, len(m.allowed))
	for key, byWin := range m.allowed {
		r.Allowed[key] = make(map[int64]Units, len(byWin))
		for win, u := range byWin {
			r.Allowed[key][win] = u
			r.WorstWindow = max(r.WorstWindow, u.All)
			if u.All > m.cfg.Limit {
				r.OverAdmitted += u.All - m.cfg.Limit
			}
		}
	}
	return r
}
