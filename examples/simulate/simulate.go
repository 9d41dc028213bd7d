package main

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// key is the one key every simulated request is counted under: one client,
// or, in a retry storm, many clients sharing one API key.
const key = "client"

// An event is one decided request.
type event struct {
	at    time.Duration // when it was sent, from the start
	cost  int64
	delay time.Duration // allowed: the leaky bucket's Delay before serving
	retry time.Duration // denied: Decision.RetryAfter
}

// outcome is what one algorithm made of the traffic.
type outcome struct {
	algorithm core.Algorithm
	allowed   []event // in time order
	denied    []event // in time order
}

// sent returns how many requests reached the limiter, retries included.
func (o outcome) sent() int { return len(o.allowed) + len(o.denied) }

// simulate runs the traffic through one limiter per algorithm, each on its
// own manual clock set to start plus each request's offset, up to d. The
// policy's Algorithm is replaced by each algorithm in turn; its Burst is
// kept for the token and leaky buckets and dropped for the others.
func simulate(p core.Policy, start time.Time, d time.Duration, t traffic) ([]outcome, error) {
	var out []outcome
	for _, a := range core.Algorithms() {
		pa := p
		pa.Algorithm = a
		if !a.Burstable() {
			pa.Burst = 0
		}
		clock := core.NewManualClock(start)
		l, err := core.New(pa, core.WithClock(clock))
		if err != nil {
			return nil, err
		}
		o := outcome{algorithm: a}
		q := &queue{}
		for _, x := range t.arrivals {
			q.add(x)
		}
		for q.Len() > 0 {
			x := heap.Pop(q).(queued).arrival
			if x.at >= d {
				break // the queue pops in time order: nothing later is in range
			}
			clock.Set(start.Add(x.at))
			dec, err := l.AllowN(context.Background(), key, x.cost)
			if err != nil {
				return nil, fmt.Errorf("%v: request at %v costing %d: %w", a, x.at, x.cost, err)
			}
			if dec.Allowed {
				o.allowed = append(o.allowed, event{at: x.at, cost: x.cost, delay: dec.Delay})
				continue
			}
			o.denied = append(o.denied, event{at: x.at, cost: x.cost, retry: dec.RetryAfter})
			if t.retry != nil {
				if next, ok := t.retry(x); ok {
					q.add(next)
				}
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// queued is an arrival waiting in the queue; seq orders arrivals sent at
// the same time by when they were queued, so the order is deterministic.
type queued struct {
	arrival
	seq int
}

// queue is a min-heap of arrivals by time, then queueing order.
type queue struct {
	items []queued
	seq   int
}

func (q *queue) add(a arrival) {
	heap.Push(q, queued{arrival: a, seq: q.seq})
	q.seq++
}

func (q *queue) Len() int { return len(q.items) }
func (q *queue) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}
func (q *queue) Swap(i, j int) { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *queue) Push(x any)    { q.items = append(q.items, x.(queued)) }
func (q *queue) Pop() any {
	last := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return last
}
