package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// Four workers, 5 requests each, through a quota of 10 a second shared in
// Redis with the demo API's limit: every request is answered 200 (10 at
// once, then 10 a second, paced by the server's headers too), and each
// worker says what it waited.
func TestRun(t *testing.T) {
	addr := redisserver.StartT(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-redis", addr, "-workers", "4", "-requests", "5"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	t.Log("\n" + got)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "demo API on http://127.0.0.1:") || !strings.HasSuffix(lines[0], ", limited to 10/1s name=api") {
		t.Fatalf("output:\n%s", got)
	}
	worker := regexp.MustCompile(`^worker (\d): 5 requests, 5 OK, 0 refused; waited (\d+) times, \S+ in all$`)
	waits := 0
	for i, l := range lines[1:5] {
		m := worker.FindStringSubmatch(l)
		if m == nil || m[1] != strconv.Itoa(i+1) {
			t.Errorf("line %q", l)
			continue
		}
		n, _ := strconv.Atoi(m[2])
		waits += n
	}
	// 20 requests, 10 of them beyond the burst: those wait.
	if waits < 10 {
		t.Errorf("%d waits in all, want at least 10", waits)
	}
	if !regexp.MustCompile(`^20 requests in \S+, 0 answered 429$`).MatchString(lines[5]) {
		t.Errorf("last line %q", lines[5])
	}
}

// Without Redis the program does not start, and says why.
func TestRunWithoutRedis(t *testing.T) {
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	noRedis := "127.0.0.1:" + strconv.Itoa(port)
	err = run(context.Background(), []string{"-redis", noRedis}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no Redis at "+noRedis) {
		t.Errorf("run without Redis: %v", err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-workers", "0"}, {"-policy", "x"}, {"extra"}} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
	s, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil || fmt.Sprint(s.policy) != "10/1s name=api" || s.workers != 4 || s.requests != 10 {
		t.Errorf("defaults %+v, %v", s, err)
	}
}
