package faults

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process on a free 127.0.0.1 port, with
// persistence off, so a restart loses every key. It is safe for concurrent
// use. Create one with [StartServer]; [Server.Stop] kills it.
type Server struct {
	addr string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
	out *bytes.Buffer
}

// StartServer starts redis-server on a free loopback port with its working
// directory in dir, persistence off and the extra configuration arguments
// (such as "--maxmemory", "2mb"), and waits, at most 10 s, until it answers
// PING.
func StartServer(dir string, extra ...string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "yes", "--daemonize", "no",
	}, extra...)
	s := &Server{addr: "127.0.0.1:" + strconv.Itoa(port), args: args}
	return s, s.Start()
}

// Addr returns the server's address, host:port.
func (s *Server) Addr() string { return s.addr }

// Start starts the server again after [Server.Stop], on the same address
// and with every key lost, and waits, at most 10 s, until it answers PING.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("redis-server", s.args...)
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("faults: start redis-server: %w", err)
	}
	s.cmd, s.out = cmd, out
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("faults: redis-server on %s did not answer PING: %w\n%s", s.addr, err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill kills the process and waits for it; s.mu is held.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts it again on the same address, with
// every key lost, and waits until it answers PING. down is how long it stays
// stopped.
func (s *Server) Restart(down time.Duration) error {
	s.Stop()
	time.Sleep(down)
	return s.Start()
}

// Stop kills the server, if it runs, and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}
