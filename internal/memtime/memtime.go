// Package memtime gives ratekit's HTTP middleware the clock reading a
// core.Memory limiter decided at, so that the middleware measures a
// request's elapsed time from that reading instead of reading the clock a
// second time per request.
//
// Package core sets Allow, Now and System when it is initialized. They are typed
// any because this package cannot name core's types: core imports it.
package memtime

// Allow is, once package core is initialized,
//
//	func(m *core.Memory, key string, n int64) (d core.Decision, now int64, err error)
//
// which decides as m.AllowN does and also returns the clock reading the
// decision was taken at, in nanoseconds on m's timeline.
var Allow any

// System is, once package core is initialized,
//
//	func(m *core.Memory) bool
//
// which reports whether m reads the system clock.
var System any

// Now is, once package core is initialized,
//
//	func(m *core.Memory) int64
//
// which reads m's clock on the timeline Allow's readings are on.
var Now any
