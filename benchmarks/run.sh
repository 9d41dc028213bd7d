#!/usr/bin/env bash
# run.sh runs ratekit's comparison with the libraries users would pick
# instead and writes benchmarks/RESULTS.md: the machine, medians, ratios
# against ratekit, the correctness probes, the HTTP load test and the full
# benchstat output.
#
# Usage, from anywhere, on a quiet machine:
#
#	benchmarks/run.sh                 # COUNT=10 runs of each benchmark
#	COUNT=3 CPUS=2 benchmarks/run.sh  # shorter
#	REDIS_ONLY=1 benchmarks/run.sh    # only the Redis cases, client and
#	                                  # server side, spliced into the
#	                                  # existing RESULTS.md's Redis section
#	MIDDLEWARE_ONLY=1 benchmarks/run.sh
#	                                  # only the Middleware cases (-cpu=1),
#	                                  # spliced into the existing
#	                                  # RESULTS.md's Middleware section
#	GATEWAY_ONLY=1 benchmarks/run.sh  # only the gateway servers (TestGateway:
#	                                  # ratekit-server beside
#	                                  # envoyproxy/ratelimit), spliced into
#	                                  # the existing RESULTS.md's Gateway
#	                                  # server section
#	REDIS_CPUS=2 benchmarks/run.sh    # the Redis cases in one client regime
#
# Environment: COUNT (runs per benchmark, default 10), CPUS (-cpu list for
# the in-memory cases, default 1,2), REDIS_CPUS (-cpu list for the Redis
# cases, default "$(nproc),1": the client on every core, and on one, where
# the Go client rather than Redis is the bottleneck), BENCHTIME (default
# 1s), LOAD_RATE and
# LOAD_DURATION (the load test; defaults 2000/s and 5s), GATEWAY_ROUNDS,
# GATEWAY_DURATION and GATEWAY_EXACT_VALUES (the gateway servers; defaults
# 3 rounds, 5s per run, exactness on 1,000 values), RATELIMIT_BIN (the
# envoyproxy/ratelimit binary; default: service_cmd in GOBIN or
# GOPATH/bin, installed with go install if missing), OUT (raw output
# directory, default benchmarks/results). Needs redis-server on PATH for
# the Redis cases (Debian: apt-get install redis-server); without it they
# are skipped and their rows are empty.
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-10}
CPUS=${CPUS:-1,2}
REDIS_CPUS=${REDIS_CPUS:-$(nproc),1}
BENCHTIME=${BENCHTIME:-1s}
OUT=${OUT:-results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.bench.txt "$OUT"/probes.md "$OUT"/loadtest.md "$OUT"/serverrate.md "$OUT"/gateway.md
export BENCH_REPORT_DIR="$OUT"

BENCHSTAT=$(command -v benchstat || true)
if [ -z "$BENCHSTAT" ] && [ -x "$HOME/go/bin/benchstat" ]; then BENCHSTAT=$HOME/go/bin/benchstat; fi
if [ -z "$BENCHSTAT" ]; then
	go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
	BENCHSTAT=$(go env GOPATH)/bin/benchstat
fi

modes=0
for m in "${REDIS_ONLY:-}" "${MIDDLEWARE_ONLY:-}" "${GATEWAY_ONLY:-}"; do
	if [ -n "$m" ]; then modes=$((modes + 1)); fi
done
if [ "$modes" -gt 1 ]; then
	echo "run.sh: set one of REDIS_ONLY, MIDDLEWARE_ONLY and GATEWAY_ONLY" >&2
	exit 2
fi

started=$(date +%s)
step() { printf '\n== %s (%ds elapsed)\n' "$1" $(($(date +%s) - started)); }

# One test binary for every step: the code measured is the code at the
# start, whatever changes in the tree while the run goes on.
go test -c -o "$OUT/benchmarks.test" .
# The gateway server from the same tree, built at the start too, for the
# runs that measure it (GOWORK empty: the repository's go.work, not this
# module's).
if [ -z "${REDIS_ONLY:-}" ] && [ -z "${MIDDLEWARE_ONLY:-}" ]; then
	GOWORK= go build -C ../cmd/ratekit-server -o "$OUT/ratekit-server" .
	export RATEKIT_SERVER_BIN="$OUT/ratekit-server"
fi
bench() { "$OUT/benchmarks.test" -test.run='^$' -test.benchmem -test.timeout=2h "$@"; }

# rounds runs a benchmark COUNT times, one run of every case per round, so
# that a slow minute on a shared machine spreads over every library instead
# of landing on one.
rounds() {
	for _ in $(seq "$COUNT"); do bench -test.count=1 "$@"; done
}

step "machine"
procs="GOMAXPROCS values run: $CPUS; the Redis cases: $REDIS_CPUS"
if [ -n "${MIDDLEWARE_ONLY:-}" ]; then procs="GOMAXPROCS=1"; fi
if [ -n "${GATEWAY_ONLY:-}" ]; then procs="GOMAXPROCS=$(nproc) for every process"; fi
{
	echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') × $(nproc) ($procs)"
	echo "- Memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "- Kernel: $(uname -sr); virtualization: $(systemd-detect-virt 2>/dev/null || echo unknown)"
	echo "- $(go version)"
	echo "- Redis: $(redis-server --version 2>/dev/null | cut -d' ' -f1-3 || echo 'not installed')"
	echo "- Load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	if [ -n "${GATEWAY_ONLY:-}" ]; then
		echo "- Runs: ${GATEWAY_ROUNDS:-3} rounds of ${GATEWAY_DURATION:-5s} per server, exactness on ${GATEWAY_EXACT_VALUES:-1000} values, $(date -u +%Y-%m-%d)"
	else
		echo "- Runs: -count=$COUNT, -benchtime=$BENCHTIME, $(date -u +%Y-%m-%d)"
	fi
} > "$OUT/machine.md"
cat "$OUT/machine.md"

# redis runs the Redis cases: serial, 32 goroutines on distinct keys and on
# one hot key, in rounds like the rest; then the server's side alone.
redis() {
	step "Redis"
	rounds -test.bench='Redis(Ping|Rate|Ulule|Ratekit|RatekitBatched)$/(token-bucket|serial|parallel32|hotkey32)' -test.cpu="$REDIS_CPUS" -test.benchtime="$BENCHTIME" | tee "$OUT/redis.bench.txt"
	step "Redis: the server's side"
	"$OUT/benchmarks.test" -test.run='^TestServerRate$' -test.count=1 -test.v > "$OUT/serverrate.txt" 2>&1 || { cat "$OUT/serverrate.txt"; echo "server rate failed"; exit 1; }
	cat "$OUT/serverrate.md" 2>/dev/null || true
}

# middleware runs the Middleware cases: each framework bare, behind
# ratekit and behind its usual limiter, on one core.
middleware() {
	step "middleware (-cpu=1)"
	rounds -test.bench='^BenchmarkMiddleware' -test.cpu=1 -test.benchtime="$BENCHTIME" | tee "$OUT/middleware.bench.txt"
}

# gateway runs TestGateway: ratekit-server beside envoyproxy/ratelimit, as
# processes on loopback, on one redis-server and on memory. The
# envoyproxy/ratelimit binary is RATELIMIT_BIN, else service_cmd in GOBIN
# or GOPATH/bin, installed from the module proxy if missing.
gateway() {
	step "gateway servers"
	if [ -z "${RATELIMIT_BIN:-}" ]; then
		bindir=$(go env GOBIN)
		if [ -z "$bindir" ]; then bindir=$(go env GOPATH | cut -d: -f1)/bin; fi
		RATELIMIT_BIN=$bindir/service_cmd
		if [ ! -x "$RATELIMIT_BIN" ]; then
			go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
		fi
		export RATELIMIT_BIN
	fi
	"$OUT/benchmarks.test" -test.run='^TestGateway$' -test.count=1 -test.v -test.timeout=1h > "$OUT/gateway.txt" 2>&1 || { cat "$OUT/gateway.txt"; echo "gateway servers failed"; exit 1; }
	cat "$OUT/gateway.md"
}

# splice replaces RESULTS.md's section $1 with the one this run measured.
splice() {
	step "RESULTS.md: the $1 section"
	go run ./internal/benchreport -dir "$OUT" -machine "$OUT/machine.md" -splice RESULTS.md -section "$1" > "$OUT/RESULTS.md"
	mv "$OUT/RESULTS.md" RESULTS.md
	step "done: benchmarks/RESULTS.md"
}

if [ -n "${REDIS_ONLY:-}" ]; then
	"$OUT/benchmarks.test" -test.run 'TestRoundTrips' -test.count=1 -test.v > "$OUT/tests.txt" 2>&1 || { cat "$OUT/tests.txt"; echo "round trip test failed"; exit 1; }
	redis
	splice Redis
	exit 0
fi
if [ -n "${MIDDLEWARE_ONLY:-}" ]; then
	middleware
	splice Middleware
	exit 0
fi
if [ -n "${GATEWAY_ONLY:-}" ]; then
	gateway
	splice "Gateway server"
	exit 0
fi

step "correctness: probes, fixture, round trips"
"$OUT/benchmarks.test" -test.run 'TestProbes|TestManyKeysFixture|TestRoundTrips' -test.count=1 -test.v > "$OUT/tests.txt" 2>&1 || { cat "$OUT/tests.txt"; echo "correctness tests failed"; exit 1; }
grep -E '^\s+probes_test.go:[0-9]+: probe ' "$OUT/tests.txt" || true

step "in memory: hot key (-cpu=$CPUS)"
rounds -test.bench='^BenchmarkHotKey$' -test.cpu="$CPUS" -test.benchtime="$BENCHTIME" | tee "$OUT/memory.bench.txt"

step "in memory: 1e6 keys (-cpu=$CPUS)"
rounds -test.bench='^BenchmarkManyKeys$' -test.cpu="$CPUS" -test.benchtime="$BENCHTIME" | tee "$OUT/manykeys.bench.txt"

step "clock reads (-cpu=$CPUS)"
rounds -test.bench='^BenchmarkClock$' -test.cpu="$CPUS" -test.benchtime="$BENCHTIME" | tee "$OUT/clock.bench.txt"

step "in memory: bytes per key"
bench -test.bench='^BenchmarkBytesPerKey$' -test.benchtime=1x -test.count=2 -test.cpu=1 | tee "$OUT/bytes.bench.txt"

redis

middleware

gateway

step "HTTP load test"
"$OUT/benchmarks.test" -test.run='^TestLoad$' -test.count=1 -test.v > "$OUT/loadtest.txt" 2>&1 || { cat "$OUT/loadtest.txt"; echo "load test failed"; exit 1; }
grep -E 'loadtest_test.go' "$OUT/loadtest.txt" || true

step "benchstat and RESULTS.md"
# One input file: benchstat compares files as columns, and these are one run.
cat "$OUT"/memory.bench.txt "$OUT"/manykeys.bench.txt "$OUT"/clock.bench.txt "$OUT"/bytes.bench.txt "$OUT"/redis.bench.txt "$OUT"/middleware.bench.txt > "$OUT/all.txt"
"$BENCHSTAT" "$OUT/all.txt" > "$OUT/benchstat.txt" 2>&1 || true
go run ./internal/benchreport -dir "$OUT" -machine "$OUT/machine.md" > RESULTS.md
step "done: benchmarks/RESULTS.md"
