// Package memmove moves one key's state from one core.Memory limiter to
// another of the same algorithm, converted to the other's policy as
// core.Memory.SetPolicy converts every key's: ratekit's rule limiter uses
// it to give a key a policy of its own (a per-key override) and to take it
// back, without the key losing its usage.
//
// Package core sets Move when it is initialized. It is typed any because
// this package cannot name core's types: core imports it.
package memmove

// Move is, once package core is initialized,
//
//	func(from, to *core.Memory, key string) error
//
// which moves key's state from from to to, atomically for both: from
// forgets key, and to holds its state carried from from's policy to to's
// by the algorithm's own conversion (the one SetPolicy uses), rounded
// towards less room. If to already holds key, it keeps whichever of the two
// states holds more units at now, so a move never gives a key more room
// than either limiter had for it. A key from does not hold moves nothing
// and leaves to as it is.
//
// Both limiters must run the same algorithm and read the same clock (the
// time is read once, from to's). It fails for an empty key, a limiter
// given twice, or two algorithms, moving nothing. It locks the key's
// shard in both limiters, in the order every core.Layered locks them, and
// is safe for concurrent use with every method of both.
var Move any
