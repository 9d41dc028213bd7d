//go:build race

package echolimit_test

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts do not hold.
const raceEnabled = true
