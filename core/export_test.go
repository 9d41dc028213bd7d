package core

// FallbackOf returns f's local fallback limiter, or nil, for the tests.
func FallbackOf(f *Failover) Limiter { return f.local }
