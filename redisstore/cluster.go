package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Following a Cluster failover.
//
// go-redis's ClusterClient routes each command by its map of slots to
// masters, loaded at the first command. It reloads the map (in the
// background, ClusterClient.ReloadState) only when a node answers MOVED,
// ASK or READONLY, and when a command finds the map older than
// ClusterOptions.ClusterStateReloadInterval, one minute by default. When a
// master dies, no command for its slots reaches a live node that could
// answer MOVED: each fails to dial the dead address (connection refused;
// after PoolSize failures in a row the node's pool returns the last dial
// error at once and probes once a second), or times out when the master
// is unreachable rather than dead; while the Cluster has marked the master
// failed and not yet promoted its replica, the other masters answer
// CLUSTERDOWN. None of these errors reloads the map, so once the replica is
// promoted the client keeps dialing the dead address until the minute is
// up: measured, 55 s after the promotion, while a new client decided on
// every key at once. go-redis's own retries do not help: with MaxRedirects
// -1 (as recommended, so that a command of unknown outcome is never sent
// again) a command is tried once; with the default 3, it is tried on the
// same node again and then on the slot's master from the same stale map,
// the dead one. A batch is no different: the pipeline maps each command to
// the stale master, and a dial error maps it there again.
//
// So a Limiter on a *redis.ClusterClient asks for a reload itself after an
// error that says the topology may have changed (topologyError): at once
// on the first, then at most once per reloadEvery while such errors go on.
// The reload runs in go-redis's background goroutine (one at a time, the
// next no sooner than 200 ms after, whoever asks); it reads CLUSTER SLOTS
// from one node, a live one at the latest after a few dial attempts on a
// dead one. Before the promotion a reload finds the dead master still in
// charge; the first one after it routes the slots to the new master, so a
// limiter decides on Redis again within about reloadEvery of the
// promotion (TestClusterMasterKilled: a few hundred ms). The cost while
// errors go on is one CLUSTER SLOTS per reloadEvery per limiter, which
// go-redis merges into at most one reload in flight per client.
//
// Nothing is sent again: the command that failed returns its error, as
// before (its outcome may be unknown: a timeout or a lost connection after
// the script was sent), and only the next decisions use the new map.
// Other clients (a single node, Sentinel's failover client, which asks
// Sentinel for the master at each dial) have no map to reload.

// reloadEvery is the least time between two reloads a limiter asks of a
// Cluster client.
const reloadEvery = 250 * time.Millisecond

// reloader asks a Cluster client to reload its slots after an error; see
// above. The zero value is ready to use.
type reloader struct {
	last atomic.Int64 // Unix ns of the last reload asked
}

// reloadAfter asks l's client, if it is a Cluster client, to reload its
// map of slots when err says the topology may have changed, at most once
// per reloadEvery.
func (l *Limiter) reloadAfter(err error) {
	if err == nil {
		return
	}
	c, ok := l.client.(*redis.ClusterClient)
	if !ok || !topologyError(err) {
		return
	}
	now := time.Now().UnixNano()
	last := l.reload.last.Load()
	if now-last < int64(reloadEvery) || !l.reload.last.CompareAndSwap(last, now) {
		return
	}
	c.ReloadState(context.Background()) // in the background: it does not wait
}

// reloadAfterBatch calls reloadAfter with the errors of a batch's
// decisions, once they are answered.
func (l *Limiter) reloadAfterBatch(batch []*waiter) {
	if _, ok := l.client.(*redis.ClusterClient); !ok {
		return // no map to reload: skip reading every answer
	}
	for _, w := range batch {
		if err := w.cmd.Err(); err != nil && topologyError(err) {
			l.reloadAfter(err)
			return
		}
	}
}

// topologyError reports whether err, from a command, says that the
// Cluster's map of slots may have changed: a network error or timeout (the
// node may be dead or cut off, and replaced), or an answer that the slot
// is served elsewhere or not at all yet. A script's own error, OOM,
// NOSCRIPT or BUSY say nothing of the topology; neither does a context the
// caller canceled.
func topologyError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true // a dial, I/O or timeout error
	}
	for _, prefix := range []string{"MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}
