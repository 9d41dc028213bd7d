// Package redisserver runs redis-server processes of our own for tests, on
// free 127.0.0.1 ports, in directories of their own, with persistence off:
// tests never touch another service's Redis. It is shared by the tests of
// our modules (redisstore, its region package, examples, benchmarks,
// faults), so it speaks RESP itself ([Do]) rather than import a Redis
// client.
//
// A [Group] holds the servers a test package shares; [StartCluster] starts
// a Redis Cluster (with redis-cli --cluster create) of a group's servers,
// whose masters, slots and replicas it can tell, whose nodes it can kill,
// and whose failover it can wait for; [StartSentinel] a master, its
// replicas and the Sentinels watching them.
package redisserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Missing returns a message naming the first of bins (default:
// redis-server) that is not installed, or "" when all are.
func Missing(bins ...string) string {
	if len(bins) == 0 {
		bins = []string{"redis-server"}
	}
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			if strings.HasPrefix(bin, "redis-") {
				return bin + " not found in PATH: install Redis (Debian: apt-get install redis-server) to run the Redis tests"
			}
			return bin + " not found in PATH: install it to run these tests (.ci/run does)"
		}
	}
	return ""
}

// Need skips t when one of bins (default: redis-server) is not installed,
// and fails it instead when the CI environment variable is set.
func Need(t testing.TB, bins ...string) {
	t.Helper()
	if msg := Missing(bins...); msg != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Server is one redis-server process on 127.0.0.1. Its methods are safe
// for concurrent use.
type Server struct {
	// Addr is the server's "127.0.0.1:port".
	Addr string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// errPortTaken is a start that failed because a port FreePort returned was
// taken before redis-server could bind it: another test's server, started
// at the same moment, can take it.
var errPortTaken = errors.New("redisserver: port taken before redis-server bound it")

// portAttempts is how many times Start tries new ports after errPortTaken.
const portAttempts = 5

// Start starts redis-server on a free port with its files in dir (which
// must exist), persistence off and extra configuration ("--maxmemory",
// "1mb"…), and waits until it answers PING. A port taken between choosing
// and binding it is chosen again.
func Start(dir string, extra ...string) (*Server, error) {
	return startWith(dir, func() ([]string, error) { return extra, nil })
}

// startWith starts a server as Start does, with extra configuration from
// args, called again for each attempt (a Cluster node's bus port is chosen
// afresh with its port).
func startWith(dir string, args func() ([]string, error)) (*Server, error) {
	var err error
	for range portAttempts {
		var port int
		if port, err = FreePort(); err != nil {
			return nil, err
		}
		var extra []string
		if extra, err = args(); err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), args: append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "yes",
		}, extra...)}
		if err = s.Start(); !errors.Is(err, errPortTaken) {
			return s, err
		}
	}
	return nil, err
}

// StartT starts a server for t, in t's temporary directory, stopped when t
// ends, and returns its address. It skips or fails t as [Need] does.
func StartT(t testing.TB, extra ...string) string {
	t.Helper()
	Need(t)
	s, err := Start(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Addr
}

// Start runs the server (again, after [Server.Stop]) on its address, and
// waits until it answers PING. It does nothing if the server runs.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	cmd := exec.Command("redis-server", s.args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisserver: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := Ping(s.Addr, 200*time.Millisecond)
		if err == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			if strings.Contains(out.String(), "Address already in use") {
				return fmt.Errorf("%w: %s\n%s", errPortTaken, s.Addr, out.String())
			}
			return fmt.Errorf("redisserver: redis-server on %s exited: %v\n%s", s.Addr, cmd.ProcessState, out.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redisserver: redis-server on %s did not answer PING: %v\n%s", s.Addr, err, out.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for the listener
	}
}

// syncBuffer is a bytes.Buffer that a process writes while Start reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Stop kills the server, if it runs, and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// Ping sends PING to the Redis server at addr and reads its answer, all
// within timeout; it returns nil for +PONG.
func Ping(addr string, timeout time.Duration) error {
	reply, err := Do(addr, timeout, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return errors.New("redisserver: PING answered " + strconv.Quote(reply))
	}
	return nil
}

// Do sends one command to the Redis server at addr on a connection of its
// own and reads the reply, all within timeout. It returns a simple string,
// an integer or a bulk string (CLUSTER NODES, INFO…) as text, and an error
// reply as an error; a null reply is [ErrNil]. Arrays are not read: ask
// for them otherwise.
func Do(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := dial(addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.do(time.Now().Add(timeout), args...)
}

// ErrNil is [Do]'s error for a null reply (GET of a missing key…).
var ErrNil = errors.New("redisserver: nil reply")

// conn is one RESP connection, for a few requests in a row.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(addr string, timeout time.Duration) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &conn{c, bufio.NewReader(c)}, nil
}

// do sends args as one command and reads its reply, by deadline; see [Do].
func (c *conn) do(deadline time.Time, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redisserver: no command")
	}
	c.SetDeadline(deadline)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redisserver: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redisserver: %s: %s", args[0], line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("redisserver: %s: reply %q", args[0], line)
		}
		if n < 0 {
			return "", ErrNil
		}
		buf := make([]byte, n+2) // and its CRLF
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '_':
		return "", ErrNil
	}
	return "", fmt.Errorf("redisserver: %s: reply %q not read (arrays and RESP3 are not)", args[0], line)
}

// Group holds the servers a test package shares, in one temporary
// directory, until [Group.Stop], which its TestMain calls. The zero Group
// is ready to use; it is safe for concurrent use.
type Group struct {
	mu      sync.Mutex
	dir     string
	servers []*Server
}

// Dir returns a new directory for a server's files, inside the group's.
func (g *Group) Dir() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dir == "" {
		d, err := os.MkdirTemp("", "ratekit-redis-")
		if err != nil {
			return "", err
		}
		g.dir = d
	}
	return os.MkdirTemp(g.dir, "node-")
}

// Start starts a server of the group, as [Start] does, in a new directory.
func (g *Group) Start(extra ...string) (*Server, error) {
	dir, err := g.Dir()
	if err != nil {
		return nil, err
	}
	return g.startIn(dir, func() ([]string, error) { return extra, nil })
}

// startIn starts a server of the group with its files in dir, one of
// [Group.Dir]'s, with extra configuration from args (see startWith).
func (g *Group) startIn(dir string, args func() ([]string, error)) (*Server, error) {
	s, err := startWith(dir, args)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.servers = append(g.servers, s)
	g.mu.Unlock()
	return s, nil
}

// Stop stops every server of the group and removes its directory.
func (g *Group) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.servers {
		s.Stop()
	}
	g.servers = nil
	if g.dir != "" {
		os.RemoveAll(g.dir)
		g.dir = ""
	}
}
