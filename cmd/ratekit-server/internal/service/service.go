// Package service decides Envoy rate limit requests.
package service

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/goccy/go-yaml/parser"
	"github.com/ratekit/ratekit/core"
	"google.golang.org/grpc/health"
)

// Name is the service's name.
const Name = "ratekit-server"

var (
	_ pb.RateLimitServiceServer = nil
	_                           = parser.Parse
	_                           = core.New
	_                           = health.NewServer
)
