package rlconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ratekit/ratekit/core"
)

func load(t *testing.T, name string) *Config {
	t.Helper()
	c, err := Load(filepath.Join("testdata", "envoy", name), false)
	if err != nil {
		t.Fatalf("Load %s: %v", name, err)
	}
	return c
}

// kv splits "k=v,k2=v2" into a descriptor's keys and values.
func kv(s string) (keys, values []string) {
	for _, p := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(p, "=")
		keys, values = append(keys, k), append(values, v)
	}
	return keys, values
}

type matchCase struct {
	desc   string // "k=v,k2=v2"
	wantID string // "" for no limit
	rpu    uint32
	unit   pb.RateLimitResponse_RateLimit_Unit
	key    string // the store key, "" not checked
}

func checkMatches(t *testing.T, c *Config, domain string, cases []matchCase) {
	t.Helper()
	for _, tc := range cases {
		k, v := kv(tc.desc)
		l, key := c.Match(domain, k, v, nil)
		switch {
		case tc.wantID == "" && l != nil:
			t.Errorf("%s: got limit %s, want none", tc.desc, l.ID)
		case tc.wantID == "":
		case l == nil:
			t.Errorf("%s: no limit, want %s", tc.desc, tc.wantID)
		case l.ID != tc.wantID || l.RequestsPerUnit != tc.rpu || l.Unit != tc.unit:
			t.Errorf("%s: got %s %d/%v, want %s %d/%v", tc.desc, l.ID, l.RequestsPerUnit, l.Unit, tc.wantID, tc.rpu, tc.unit)
		case tc.key != "" && strings.ReplaceAll(string(key), "\x00", "|") != tc.key:
			t.Errorf("%s: key %q, want %q", tc.desc, strings.ReplaceAll(string(key), "\x00", "|"), tc.key)
		}
	}
}

const (
	sec    = pb.RateLimitResponse_RateLimit_SECOND
	minute = pb.RateLimitResponse_RateLimit_MINUTE
	hour   = pb.RateLimitResponse_RateLimit_HOUR
	day    = pb.RateLimitResponse_RateLimit_DAY
)

// The lookups of envoyproxy/ratelimit's TestBasicConfig.
func TestBasicConfig(t *testing.T) {
	c := load(t, "basic_config.yaml")
	if l, _ := c.Match("foo_domain", []string{"key2"}, []string{"x"}, nil); l != nil {
		t.Errorf("unknown domain: got %s", l.ID)
	}
	if l, _ := c.Match("test-domain", nil, nil, nil); l != nil {
		t.Errorf("no entries: got %s", l.ID)
	}
	checkMatches(t, c, "test-domain", []matchCase{
		{desc: "key1=something"},
		{desc: "key1=value1"},
		{desc: "key2=value2,subkey=subvalue"},
		{desc: "key5=value5,subkey5=subvalue"},
		{"key1=value1,subkey1=something", "test-domain.key1_value1.subkey1", 5, sec, "key1|value1|subkey1|something|"},
		{"key1=value1,subkey1=subvalue1", "test-domain.key1_value1.subkey1_subvalue1", 10, sec, ""},
		{"key2=something", "test-domain.key2", 20, minute, ""},
		{"key2=value2", "test-domain.key2_value2", 30, minute, ""},
		{desc: "key2=value3"},
		{"key3=foo", "test-domain.key3", 1, hour, ""},
		{"key4=foo", "test-domain.key4", 1, day, ""},
		{"key5=value5", "test-domain.key5_value5", 15, day, ""},
		{"key5=value5,subkey5=subvalue5", "test-domain.key5_value5.subkey5_subvalue5", 25, day, ""},
		{"key7=unspecified", "test-domain.key7", 70, minute, ""},
	})
	k, v := kv("key6=x")
	if l, _ := c.Match("test-domain", k, v, nil); l == nil || !l.Unlimited {
		t.Errorf("key6: got %+v, want an unlimited limit", l)
	}
	k, v = kv("key4=x")
	if l, _ := c.Match("test-domain", k, v, nil); l == nil || l.Name != "key4_rate_limit" || l.Policy.Name != "key4_rate_limit" {
		t.Errorf("key4: got %+v, want the name key4_rate_limit", l)
	}
	k, v = kv("key7=x")
	if l, _ := c.Match("test-domain", k, v, nil); l == nil || !l.DetailedMetric {
		t.Errorf("key7: got %+v, want detailed_metric", l)
	}
}

// The lookups of envoyproxy/ratelimit's TestWildcardConfig.
func TestWildcardConfig(t *testing.T) {
	c := load(t, "wildcard.yaml")
	checkMatches(t, c, "test-domain", []matchCase{
		{"wild=foo", "test-domain.wild_foo*", 20, minute, "wild|foo|"},
		{"wild=foo1", "test-domain.wild_foo*", 20, minute, "wild|foo1|"},
		{"wild=foo1bar", "test-domain.wild_foo*", 20, minute, ""},
		{desc: "wild=bar"},
		{"noWild=foo", "test-domain.noWild_foo", 20, minute, ""},
		{desc: "noWild=foo1"},
		{"noVal=anything", "test-domain.noVal", 20, minute, ""},
		{"midWild=barab", "test-domain.midWild_bar*b", 20, minute, ""},
		{"midWild=barb", "test-domain.midWild_bar*b", 20, minute, ""},
		{desc: "midWild=bara"},
		{desc: "midWild=bar"},
		{"multiWild=foo1bar2baz", "test-domain.multiWild_foo*bar*baz", 10, minute, ""},
		{"multiWild=foobarbaz", "test-domain.multiWild_foo*bar*baz", 10, minute, ""},
		{desc: "multiWild=foobaz"},
		{desc: "multiWild=foobarbazz"},
		{"nestedWild=val1,wild=goo2", "test-domain.nestedWild_val1.wild_goo*", 20, minute, ""},
		{desc: "nestedWild=val1,wild=foo"},
	})
}

// share_threshold: the values matching the wildcard share one store key.
func TestShareThreshold(t *testing.T) {
	c := load(t, "share_threshold.yaml")
	checkMatches(t, c, "test-domain", []matchCase{
		{"files=files/a.pdf", "test-domain.files_files/*", 100, minute, "files|files/*|"},
		{"files=files/b.csv", "test-domain.files_files/*", 100, minute, "files|files/*|"},
		{"nested=parent,files=nested/x", "test-domain.nested_parent.files_nested/*", 200, minute, "nested|parent|files|nested/*|"},
		{"files=top/1,files=nested/2", "test-domain.files_top/*.files_nested/*", 300, minute, "files|top/*|files|nested/*|"},
		{"path=path/a,file=file/b,type=t", "test-domain.path_path/*.file_file/*.type", 120, minute, "path|path/*|file|file/b|type|t|"},
		{"file=test1", "test-domain.file_test1", 50, minute, "file|test1|"},
		{"file=test2", "test-domain.file_test*", 100, minute, "file|test*|"},
		{"midpath=/api/foo/v1", "test-domain.midpath_/api*v1", 100, minute, "midpath|/api*v1|"},
	})
}

func TestFilesThatLoad(t *testing.T) {
	for _, name := range []string{"shadowmode_config.yaml", "metadata.yaml"} {
		load(t, name)
	}
	c := load(t, "shadowmode_config.yaml")
	shadow := 0
	for _, l := range c.Limits() {
		if l.Shadow {
			shadow++
		}
	}
	if shadow == 0 {
		t.Error("shadowmode_config.yaml: no limit in shadow mode")
	}
}

// The files envoyproxy/ratelimit refuses are refused, each error naming the
// file, the line and column and the field.
func TestFilesThatFail(t *testing.T) {
	for _, tc := range []struct {
		file, want string
	}{
		{"bad_limit_unit.yaml", `bad_limit_unit.yaml:6:13: descriptors[0].rate_limit.unit: invalid unit "foo"`},
		{"duplicate_key.yaml", `duplicate_key.yaml:6:5: descriptors[1]: duplicate descriptor "key1_value1"`},
		{"misspelled_key.yaml", `misspelled_key.yaml:5:5: descriptors[0].ratelimit: unknown field`},
		{"non_map_list.yaml", `non_map_list.yaml:3:5: descriptors[0]: want a mapping, got a string`},
		{"replaces_self.yaml", `replaces_self.yaml:10:15: descriptors[0].descriptors[0].rate_limit.replaces[0].name: "self" is this limit's own name`},
		{"replaces_empty.yaml", `replaces_empty.yaml:10:15: descriptors[0].descriptors[0].rate_limit.replaces[0].name: empty`},
		{"unlimited_with_unit.yaml", `unlimited_with_unit.yaml:6:13: descriptors[0].rate_limit: an unlimited limit has no unit`},
		{"empty_domain.yaml", `empty_domain.yaml:1:1: domain: empty`},
		{"empty_key.yaml", `empty_key.yaml:3:5: descriptors[0].key: empty`},
		{"bad_yaml.yaml", `bad_yaml.yaml:`},
		{"non_string_key.yaml", `non_string_key.yaml:1:1: 0.25: unknown field`},
	} {
		_, err := Load(filepath.Join("testdata", "envoy", tc.file), false)
		if err == nil {
			t.Errorf("%s: loaded, want an error", tc.file)
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v is no *Error", tc.file, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.file, err, tc.want)
		}
	}
}

func TestFailure(t *testing.T) {
	f, err := Parse("x", []byte("domain: d\nfailure: fallback\ninstances: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Build(false, f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Failure("d"), (Failure{Mode: FailFallback, Instances: 3}); got != want {
		t.Errorf("Failure %+v, want %+v", got, want)
	}
	if got := load(t, "basic_config.yaml").Failure("test-domain"); got != (Failure{Mode: FailError, Instances: 1}) {
		t.Errorf("default Failure %+v", got)
	}
}

func TestDuplicateDomain(t *testing.T) {
	dir := t.TempDir()
	a := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	b := "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n"
	write(t, dir, "a.yaml", a)
	write(t, dir, "b.yaml", b)
	write(t, dir, ".hidden.yaml", "not: [yaml")
	write(t, dir, "notes.txt", "ignored")
	if _, err := Load(dir, false); err == nil || !strings.Contains(err.Error(), `domain "d" is`) {
		t.Errorf("two files of one domain: %v, want an error", err)
	}
	c, err := Load(dir, true)
	if err != nil {
		t.Fatalf("merged: %v", err)
	}
	checkMatches(t, c, "d", []matchCase{{"a=1", "d.a", 1, sec, ""}, {"b=1", "d.b", 2, sec, ""}})
	write(t, dir, "c.yaml", a)
	if _, err := Load(dir, true); err == nil || !strings.Contains(err.Error(), "d.a") {
		t.Errorf("merged, one descriptor twice: %v, want an error", err)
	}
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ratekit's extensions: algorithm, burst and window.
func TestExtensions(t *testing.T) {
	f, err := Parse("x.yaml", []byte(`domain: d
descriptors:
  - key: plan
    value: pro
    rate_limit:
      requests_per_unit: 1000
      window: 10m
      algorithm: token-bucket
      burst: 200
  - key: user
    rate_limit:
      requests_per_unit: 5
      unit: minute
      algorithm: sliding-window
  - key: ip
    rate_limit: {requests_per_unit: 0, unit: second}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Build(false, f)
	if err != nil {
		t.Fatal(err)
	}
	want := []core.Policy{
		{Name: "plan_pro", Algorithm: core.TokenBucket, Limit: 1000, Window: 10 * time.Minute, Burst: 200},
		{Name: "user", Algorithm: core.SlidingWindow, Limit: 5, Window: time.Minute},
		{Name: "ip", Algorithm: core.FixedWindow, Limit: 0, Window: time.Second},
	}
	ls := c.Limits()
	if len(ls) != len(want) {
		t.Fatalf("%d limits, want %d", len(ls), len(want))
	}
	for i, l := range ls {
		if l.Policy != want[i] {
			t.Errorf("limit %d: %+v, want %+v", i, l.Policy, want[i])
		}
	}
	if ls[0].Unit != pb.RateLimitResponse_RateLimit_UNKNOWN || ls[1].Unit != minute {
		t.Errorf("units %v %v, want UNKNOWN (10m is no unit) and MINUTE", ls[0].Unit, ls[1].Unit)
	}
	if ls[0].Line != 6 || ls[0].Column != 7 || ls[0].File != "x.yaml" {
		t.Errorf("limit 0 at %s:%d:%d, want x.yaml:6:7", ls[0].File, ls[0].Line, ls[0].Column)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"window and unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, window: 2s, requests_per_unit: 1}\n", "x:4:40: descriptors[0].rate_limit.window: give unit or window, not both"},
		{"bad window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      window: 2x\n      requests_per_unit: 1\n", `x:5:15: descriptors[0].rate_limit.window: "2x" is not a window`},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      algorithm: magic\n      requests_per_unit: 1\n", `x:6:18: descriptors[0].rate_limit.algorithm:`},
		{"burst on a fixed window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      burst: 3\n      requests_per_unit: 1\n", `x:6:14: descriptors[0].rate_limit: core: policy "a": Burst`},
		{"requests_per_unit negative", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", `x:6:26: descriptors[0].rate_limit.requests_per_unit: -1 is not a whole number`},
		{"quota_mode", "domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n", `x:4:17: descriptors[0].quota_mode: quota_mode is not supported`},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", `x:5:22: descriptors[0].share_threshold: share_threshold needs a wildcard`},
		{"bad failure", "domain: d\nfailure: sometimes\n", `x:2:10: failure: "sometimes"; want error, open or fallback`},
		{"instances without fallback", "domain: d\nfailure: open\ninstances: 2\n", `x:3:12: instances: instances is for failure: fallback`},
		{"anchor", "domain: &x d\n", "x:1:9: anchors and aliases are not allowed"},
		{"tag", "domain: !!str d\n", "x:1:9: tags are not allowed"},
		{"two documents", "domain: d\n---\ndomain: e\n", "more than one document"},
		{"empty", "", "x: the file is empty"},
		{"too deep", "domain: d\ndescriptors:\n" + deep(MaxDepth+1), "nested deeper than 16"},
		{"too large", "domain: d\n#" + strings.Repeat("x", MaxFileBytes), "x: the file is"},
	} {
		_, err := Parse("x", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
	}
}

// deep returns n descriptors nested in each other.
func deep(n int) string {
	var b strings.Builder
	for i := range n {
		ind := strings.Repeat("    ", i)
		b.WriteString(ind + "  - key: k\n")
		if i < n-1 {
			b.WriteString(ind + "    descriptors:\n")
		}
	}
	return b.String()
}
