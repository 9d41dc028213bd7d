// Package redisserver runs redis-server processes of our own for tests, on
// free 127.0.0.1 ports, in directories of their own, with persistence off:
// tests never touch another service's Redis. It is shared by the tests of
// our modules (redisstore, its region package, examples, benchmarks,
// faults), so it speaks RESP itself rather than import a Redis client.
package redisserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
}

// Start starts redis-server on a free port with its files in dir (which
// must exist), persistence off and extra configuration ("--maxmemory",
// "1mb"…), and waits until it answers PING.
func Start(dir string, extra ...string) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "yes",
	}, extra...)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), args: args}
	return s, s.Start()
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
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisserver: start redis-server: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := Ping(s.Addr, 200*time.Millisecond)
		if err == nil {
			s.cmd = cmd
			return nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return fmt.Errorf("redisserver: redis-server on %s did not answer PING: %v\n%s", s.Addr, err, out.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for the listener
	}
}

// Stop kills the server, if it runs, and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Ping sends PING to the Redis server at addr and reads its answer, all
// within timeout; it returns nil for +PONG.
func Ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimRight(line, "\r\n"); line != "+PONG" {
		return errors.New("redisserver: PING answered " + strconv.Quote(line))
	}
	return nil
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
	s, err := Start(dir, extra...)
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
