// Package flakystore is a limiter for tests whose store can be taken down:
// the remote of a Failover, a DenialCache or an observed limiter in core's
// and observe's tests. It is for tests only.
package flakystore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ratekit/ratekit/core"
)

// ErrDown is the error of every call while the store is down.
var ErrDown = errors.New("store: connection refused")

// Store fails AllowN, Peek and Reset with [ErrDown] while Down is set and
// otherwise decides by its memory limiter. It counts those calls.
type Store struct {
	*core.Memory
	Down    atomic.Bool
	Calls   atomic.Int64
	Gate    chan struct{} // when set, each call sends on Entered and waits on Gate
	Entered chan struct{}
}

// New returns a Store deciding p on clock, up. It fails t if p is invalid.
func New(t testing.TB, p core.Policy, clock core.Clock) *Store {
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return &Store{Memory: m}
}

// Call counts a call, waits at Gate if set, and returns ErrDown while the
// store is down: what AllowN, Peek and Reset do before deciding, for a
// test's own method (a failing Refund, say).
func (s *Store) Call() error {
	s.Calls.Add(1)
	if s.Gate != nil {
		s.Entered <- struct{}{}
		<-s.Gate
	}
	if s.Down.Load() {
		return ErrDown
	}
	return nil
}

// AllowN is the memory limiter's, or ErrDown.
func (s *Store) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := s.Call(); err != nil {
		return core.Decision{}, fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.AllowN(ctx, key, n)
}

// Peek is the memory limiter's, or ErrDown.
func (s *Store) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := s.Call(); err != nil {
		return core.Decision{}, fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.Peek(ctx, key, n)
}

// Reset is the memory limiter's, or ErrDown.
func (s *Store) Reset(ctx context.Context, key string) error {
	if err := s.Call(); err != nil {
		return fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.Reset(ctx, key)
}
