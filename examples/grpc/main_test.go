package main

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/exampletest"
)

var update = flag.Bool("update", false, "rewrite testdata/transcript.golden")

// TestTranscript runs the service and the client over 127.0.0.1 on a
// manual clock, which the client's wait advances: the third Report is
// refused with a RetryInfo of 2 seconds, the client waits exactly that,
// and its next call succeeds.
func TestTranscript(t *testing.T) {
	clock := exampletest.NewClock()
	var waited time.Duration
	var out bytes.Buffer
	err := run(&out, clock, func(d time.Duration) {
		waited += d
		clock.Advance(d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if waited != 2*time.Second {
		t.Errorf("the client waited %v, want 2s", waited)
	}
	if *update {
		if err := os.WriteFile("testdata/transcript.golden", out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/transcript.golden")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("transcript changed; got:\n%s\nwant:\n%s\n(rerun with -update if the change is intended)", out.Bytes(), want)
	}
}

// A client that is refused more often than it may retry gives up with the
// refusal, and retryDelay finds no delay in other errors.
func TestClientGivesUp(t *testing.T) {
	clock := exampletest.NewClock()
	var out bytes.Buffer
	waits := 0
	err := run(&out, clock, func(time.Duration) { waits++ }) // waiting without time passing
	if err == nil {
		t.Fatalf("the client succeeded without time passing:\n%s", out.Bytes())
	}
	if _, ok := retryDelay(err); !ok || waits != maxAttempts-1 {
		t.Errorf("error %v (a RetryInfo: %v) after %d waits, want a refusal after %d", err, ok, waits, maxAttempts-1)
	}
	if _, ok := retryDelay(os.ErrNotExist); ok {
		t.Error("retryDelay found a delay in a non-status error")
	}
}
