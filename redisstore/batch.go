package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMaxBatch is the most decisions [WithBatching] sends in one
// pipeline when it is given 0.
const DefaultMaxBatch = 64

// WithBatching lets concurrent decisions of the limiter share round trips
// ("smart batching"). A decision made while none of the limiter's round
// trips is in flight is sent at once, exactly as without batching; decisions
// made while one is in flight wait for it to end and are then sent
// together, at most maxBatch (0: [DefaultMaxBatch]) in one pipeline, with
// [redis.UniversalClient.Pipeline], which a Cluster client splits by node.
// So an idle limiter adds no latency, and a busy one sends far fewer
// packets and system calls per decision: see the benchmarks.
//
// Each decision is still one EVALSHA, run atomically on its own, so the
// decisions are those without batching. What a batch changes:
//
//   - A queued decision waits for the round trip in flight, then its own:
//     about two round trips at most under load, one when idle.
//   - A batch's deadline is the latest of its decisions' (with [WithTimeout]
//     applied to each), or none if one of them has none. A caller whose
//     context ends stops waiting at once and gets the context's error; if
//     its decision was still queued it is never sent, and if it was sent it
//     may still run, once.
//   - An error that fails a batch (a timeout, a broken connection) is the
//     error of each of its decisions. The limiter never sends a decision
//     again, so each may have been counted once, never twice. go-redis
//     retries pipelines as it retries commands, so the client needs
//     MaxRetries: -1 here too (see the package documentation).
//   - Decisions answered NOSCRIPT did not run: they are sent once more, as
//     EVAL, as without batching.
//
// No goroutine runs while the limiter is idle: while decisions are queued
// one goroutine sends the batches, and it exits once the queue is empty, so
// a Limiter needs no Close. Default: no batching; a negative maxBatch is an
// error.
func WithBatching(maxBatch int) Option {
	return func(o *options) { o.batching, o.maxBatch = true, maxBatch }
}

// batcher queues the decisions made while a round trip is in flight. At
// most one round trip per limiter is in flight at a time: the caller that
// finds none sends its own decision (busy until it is answered); if others
// queued meanwhile, it starts the flusher, which sends the queue in batches
// until it is empty, then clears busy and exits.
type batcher struct {
	l   *Limiter
	max int

	mu    sync.Mutex
	busy  bool      // a round trip is in flight, or the flusher runs
	queue []*waiter // not yet sent

	batch []*waiter // the flusher's, reused
}

// waiter is one queued decision.
type waiter struct {
	ctx  context.Context
	cmd  *redis.Cmd    // the flusher may replace it by its EVAL
	sent bool          // taken by the flusher; guarded by batcher.mu
	done chan struct{} // signalled once the cmd is answered; buffered
}

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// run sends cmd, alone or in a batch, and returns the command that
// answered (see Limiter.run).
func (b *batcher) run(ctx context.Context, cmd *redis.Cmd) (*redis.Cmd, error) {
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		cmd, err := b.l.run(ctx, cmd)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.busy = false
			b.mu.Unlock()
		} else {
			b.mu.Unlock()
			go b.flush()
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
func (w *waiter) answer() (*redis.Cmd, error) {
	cmd := w.cmd
	w.ctx, w.cmd = nil, nil
	waiters.Put(w)
	return cmd, cmd.Err()
}

// flush sends the queue, in batches of at most b.max, until it is empty.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		batch := b.batch[:0]
		var skipped []*waiter
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
		b.batch = batch
	}
}

// send runs batch as one pipeline, and the decisions answered NOSCRIPT as a
// second one, of EVALs.
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
	for _, w := range batch {
		_ = pipe.Process(ctx, w.cmd)
	}
	_, _ = pipe.Exec(ctx)

	var again redis.Pipeliner
	for _, w := range batch {
		if isNoScript(w.cmd.Err()) {
			if again == nil {
				again = b.l.client.Pipeline()
			}
			w.cmd = b.l.evalOf(ctx, w.cmd)
			_ = again.Process(ctx, w.cmd)
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
}
