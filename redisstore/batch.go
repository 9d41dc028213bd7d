package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMaxBatch is the most decisions a limiter sends in one pipeline
// by default, or when [WithBatching] is given 0.
const DefaultMaxBatch = 64

// WithBatching sets the most decisions of one limiter that share a round
// trip; batching is on by default. A decision made while fewer than two of
// the limiter's round trips are in flight, and none is queued, is sent at
// once, alone: an idle limiter adds no round trip and no wait. Decisions
// made while two are in flight queue and leave together when one ends, at
// most maxBatch in one pipeline (a Cluster client splits it by node). The
// decisions of a batch that share a node (on a Cluster, a hash slot) are
// made by one call of a batch script, one after the other, each the one an
// unbatched limiter makes, and each failing alone if its key holds what
// the script cannot read; a queued one takes about two round trips. A
// batch's deadline is
// the latest of its decisions'; a caller whose context ends stops waiting
// at once. An error that fails a batch is each of its decisions' error;
// none is sent twice (give the client MaxRetries: -1: go-redis retries
// pipelines too). No goroutine runs while the limiter is idle. 0 means
// [DefaultMaxBatch]; 1 turns batching off; negative is an error.
func WithBatching(maxBatch int) Option {
	return func(o *options) { o.maxBatch = maxBatch }
}

// batcher queues the decisions made while round trips are in flight. At
// most inFlight round trips per limiter are in flight at a time: a caller
// that finds fewer, and nothing queued, sends its own decision at once
// (taking a sender's place until it is answered); others queue. A sender
// that finds decisions queued when its round trip ends hands its place to
// a flusher, which sends the queue in batches until it is empty, then
// gives the place up and exits.
type batcher struct {
	l   *Limiter
	max int

	mu      sync.Mutex
	senders int       // round trips in flight, or flushers running
	queue   []*waiter // not yet sent
}

// inFlight is the most round trips a batching limiter has in flight: two,
// so that Redis runs one batch while the client reads the answers of the
// other and queues the next (with one, client and server take turns).
const inFlight = 2

// waiter is one queued decision.
type waiter struct {
	ctx     context.Context
	cmd     redis.Cmder   // the flusher may replace it by its EVAL
	sent    bool          // taken by the flusher; guarded by batcher.mu
	grouped bool          // sent in a batch script (a group's member)
	done    chan struct{} // signalled once the cmd is answered; buffered
}

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// run sends cmd, alone or in a batch, and returns the command that
// answered (see Limiter.run).
func (b *batcher) run(ctx context.Context, cmd redis.Cmder) (redis.Cmder, error) {
	b.mu.Lock()
	if b.senders < inFlight && len(b.queue) == 0 {
		b.senders++
		b.mu.Unlock()
		cmd, err := b.l.run(ctx, cmd)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.senders--
			b.mu.Unlock()
		} else {
			b.mu.Unlock()
			go b.flush() // in this sender's place
		}
		return cmd, err
	}
	w := waiters.Get().(*waiter)
	w.ctx, w.cmd, w.sent = ctx, cmd, false
	b.queue = append(b.queue, w)
	b.mu.Unlock()

	select {
	case <-w.done:
		return w.answer()
	case <-ctx.Done():
	}
	select {
	case <-w.done: // answered meanwhile
		return w.answer()
	default:
	}
	b.mu.Lock()
	if !w.sent {
		for i, q := range b.queue {
			if q == w {
				last := len(b.queue) - 1
				copy(b.queue[i:], b.queue[i+1:])
				b.queue[last] = nil
				b.queue = b.queue[:last]
				break
			}
		}
		b.mu.Unlock()
		w.ctx, w.cmd = nil, nil
		waiters.Put(w)
		return cmd, ctx.Err() // never sent
	}
	b.mu.Unlock()
	// Sent: it may still run, once. The flusher signals w.done later (it is
	// buffered); w is left to the garbage collector.
	return cmd, ctx.Err()
}

// answer returns w's command and error, and w to the pool.
func (w *waiter) answer() (redis.Cmder, error) {
	cmd := w.cmd
	w.ctx, w.cmd = nil, nil
	waiters.Put(w)
	return cmd, cmd.Err()
}

// flush sends the queue, in batches of at most b.max, until it is empty,
// in a sender's place.
func (b *batcher) flush() {
	var batch, skipped []*waiter
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.senders--
			b.mu.Unlock()
			return
		}
		batch, skipped = batch[:0], skipped[:0]
		taken := 0
		for _, w := range b.queue {
			if len(batch) == b.max {
				break
			}
			taken++
			w.sent = true
			if err := w.ctx.Err(); err != nil {
				// Its caller has given up: never send it.
				w.cmd.SetErr(err)
				skipped = append(skipped, w)
				continue
			}
			batch = append(batch, w)
		}
		rest := copy(b.queue, b.queue[taken:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()

		if len(batch) > 0 {
			b.send(batch)
		}
		for _, w := range batch {
			w.done <- struct{}{}
		}
		for _, w := range skipped {
			w.done <- struct{}{}
		}
		clear(batch)
		clear(skipped)
		// The callers just answered often decide again at once: let them
		// run and queue before the queue is found empty and the place
		// given up, or the first of them, finding a place and no queue,
		// would send its decision alone (on one P, every time).
		runtime.Gosched()
	}
}

// send runs batch as one pipeline, and the calls answered without running
// (NOSCRIPT, a function not found or FCALL refused: see again) as a second
// one.
func (b *batcher) send(batch []*waiter) {
	ctx := context.Background()
	var latest time.Time
	for _, w := range batch {
		dl, ok := w.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	pipe := b.l.client.Pipeline()
	var groups []*group
	if b.l.multi != noMulti {
		groups = b.group(ctx, batch, pipe)
	} else {
		for _, w := range batch {
			_ = pipe.Process(ctx, w.cmd)
		}
	}
	_, _ = pipe.Exec(ctx)

	var again redis.Pipeliner
	var r retry
	for _, w := range batch {
		if err := w.cmd.Err(); !w.grouped && err != nil {
			if c := b.l.again(ctx, w.cmd, err, &r); c != nil {
				if again == nil {
					again = b.l.client.Pipeline()
				}
				w.cmd = c
				_ = again.Process(ctx, w.cmd)
			}
		}
	}
	for _, g := range groups {
		if err := g.cmd.Err(); err != nil {
			if c := b.l.again(ctx, g.cmd, err, &r); c != nil {
				if again == nil {
					again = b.l.client.Pipeline()
				}
				g.cmd = c.(*redis.StringCmd)
				_ = again.Process(ctx, g.cmd)
			}
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
	for _, g := range groups {
		g.answer()
	}
	b.l.reloadAfterBatch(batch) // after a Cluster failover (cluster.go)
}

// A batch's decisions.
//
// A batch script (batch.lua) makes several decisions of one policy in one
// call, one after the other, each exactly as the policy's script would:
// Redis's cost of a call (reading the command, finding the script, setting
// up its arguments, reading TIME, writing the reply) is paid once for all.
// A single node (or Sentinel's master) runs every decision of a batch in
// one call; a Cluster one call per hash slot, as a script may only reach
// the keys of one slot; a Ring, which may keep any two keys on different
// shards, and a client of another type, one call per decision. The
// batch's other commands (refunds) are sent in the same pipeline. Moving
// them after its decisions in one call changes no outcome that a caller
// could tell apart: they were all pending at once, so any order is one
// they could have been made in.

// multi says how a limiter's batches group their decisions.
type multi uint8

const (
	noMulti      multi = iota // one call per decision
	singleMulti               // one call for every decision of a batch
	clusterMulti              // one call per hash slot
)

// multiOf returns how a limiter on client groups decisions.
func multiOf(client redis.UniversalClient) multi {
	switch client.(type) {
	case *redis.Client:
		return singleMulti
	case *redis.ClusterClient:
		return clusterMulti
	}
	return noMulti
}

// one is the cost 1, boxed once.
var one any = int64(1)

// group is the decisions of a batch that share one call.
type group struct {
	slot    int
	members []*waiter
	cmd     *redis.StringCmd // of the batch script, when members > 1
}

// group adds the commands of batch to pipe: its decisions grouped, the
// others as they are; it returns the groups of more than one decision.
func (b *batcher) group(ctx context.Context, batch []*waiter, pipe redis.Pipeliner) []*group {
	var groups []*group
	cf := b.l.cur.Load()
	for _, w := range batch {
		w.grouped = false
		c, ok := w.cmd.(*redis.StringCmd)
		if !ok || len(c.Args()) != 4 && len(c.Args()) != 6 && len(c.Args()) != 8 {
			_ = pipe.Process(ctx, w.cmd) // not a decision
			continue
		}
		if a := c.Args(); a[1] != cf.sha && a[1] != cf.fn || len(a) == 8 && a[7] != cf.since || (len(a) == 6 || len(a) == 4) && cf.since != nil {
			// Made under a policy SetPolicy has since replaced: its own
			// script.
			_ = pipe.Process(ctx, w.cmd)
			continue
		}
		slot := 0
		if b.l.multi == clusterMulti {
			k := c.Args()[3].(string)
			slot = keySlot(k[len(b.l.prefix) : len(k)-1])
		}
		var g *group
		for _, h := range groups {
			if h.slot == slot {
				g = h
				break
			}
		}
		if g == nil {
			g = &group{slot: slot}
			groups = append(groups, g)
		}
		g.members = append(g.members, w)
	}
	multis := groups[:0]
	for _, g := range groups {
		if len(g.members) == 1 {
			_ = pipe.Process(ctx, g.members[0].cmd) // alone: its own script
			continue
		}
		// EVALSHA bsha k key... (now n)... [since], or its FCALL
		k := len(g.members)
		args := make([]any, 3+3*k, 4+3*k)
		args[0], args[1] = b.l.verb(cf.bsha, cf.bfn)
		args[2] = k
		if cf.since != nil {
			args = append(args, cf.since)
		}
		for i, w := range g.members {
			a := w.cmd.Args()
			if len(a) == 4 {
				// No ARGV: a request of cost 1 on the server's TIME.
				args[3+i], args[3+k+2*i], args[4+k+2*i] = a[3], "", one
			} else {
				args[3+i], args[3+k+2*i], args[4+k+2*i] = a[3], a[4], a[5]
			}
			w.grouped = true
		}
		g.cmd = redis.NewStringCmd(ctx, args...)
		_ = pipe.Process(ctx, g.cmd)
		multis = append(multis, g)
	}
	return multis
}

// answer gives each decision of g its answer: its part of the batch
// script's, or the call's error.
func (g *group) answer() {
	r, err := g.cmd.Result()
	for _, w := range g.members {
		c := w.cmd.(*redis.StringCmd)
		if err != nil {
			c.SetErr(err)
			continue
		}
		if len(r) < 8 {
			c.SetErr(fmt.Errorf("batch script returned %d bytes too few", len(r)))
			continue
		}
		if v := be64(r); v <= -2 {
			// Fresh: -2 - resetAfter alone (batch.lua), which decision
			// reads as it is.
			c.SetVal(r[:8])
			r = r[8:]
			continue
		} else if v >= 0 {
			if len(r) < answerLen {
				c.SetErr(fmt.Errorf("batch script returned %d bytes too few", answerLen-len(r)))
				r = ""
				continue
			}
			c.SetVal(r[:answerLen])
			r = r[answerLen:]
			continue
		}
		// -1, the message's length, the message: this decision failed.
		if len(r) < 16 || be64(r[8:]) < 0 || int64(len(r)-16) < be64(r[8:]) {
			c.SetErr(errors.New("batch script returned a malformed error"))
			r = ""
			continue
		}
		m := 16 + int(be64(r[8:]))
		c.SetErr(scriptError(r[16:m]))
		r = r[m:]
	}
}

// scriptError is the error of one decision in a batch script: what Redis
// would have answered to its own script, such as WRONGTYPE.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks a reply from Redis (see [redis.Error]).
func (scriptError) RedisError() {}
