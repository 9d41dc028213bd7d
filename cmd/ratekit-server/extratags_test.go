package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlconfig"
	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlservice"
)

// envoyproxy/ratelimit's TestBasicConfig_ExtraTags: EXTRA_TAGS labels the
// per descriptor statistics (its config_load_success counter has no
// counterpart here: loads and reloads are logged).
func TestExtraTags(t *testing.T) {
	env := map[string]string{"RUNTIME_ROOT": "/srv", "EXTRA_TAGS": "foo:bar,a:b"}
	s, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rlconfig.Load(filepath.Join("internal", "rlserver", "testdata", "envoy-integration", "config"), false)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l, err := rlservice.New(c, rlservice.Options{Registerer: registerer(s, reg)})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.RateLimitRequest{Domain: "basic", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "key1", Value: "foo"}}}}}
	if _, err := l.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_rate_limit_total_hits" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["domain"] == "basic" && labels["foo"] == "bar" && labels["a"] == "b" && m.GetCounter().GetValue() == 1 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no total_hits of 1 labelled foo=bar, a=b for basic in %v", mfs)
	}
	for _, bad := range []string{"foo", ":bar", "foo:bar,"} {
		env["EXTRA_TAGS"] = bad
		if _, err := parse(nil, func(k string) string { return env[k] }, io.Discard); err == nil {
			t.Errorf("EXTRA_TAGS=%q: no error", bad)
		}
	}
}
