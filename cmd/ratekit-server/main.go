// Command ratekit-server is a rate limit service for gateways that speak
// Envoy's rate limit API (envoy.service.ratelimit.v3.RateLimitService).
package main

import (
	"fmt"
	"os"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/service"
)

func main() {
	fmt.Fprintln(os.Stderr, service.Name)
}
