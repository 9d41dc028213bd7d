// Command ratekit-server is a rate limit service for gateways that speak
// Envoy's rate limit API (envoy.service.ratelimit.v3.RateLimitService):
// Envoy, Envoy Gateway, Istio, kgateway. It reads envoyproxy/ratelimit's
// configuration files as they are and decides by ratekit's algorithms, a
// request's descriptors all or nothing.
//
//	ratekit-server -config ./ratelimit.yaml -grpc-addr :8081
//
// Flags beat the environment variables envoyproxy/ratelimit reads, which
// serve as their defaults (docs/server.md has the list): RUNTIME_ROOT,
// RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY name the configuration
// directory, GRPC_HOST and GRPC_PORT (or GRPC_UDS) the listen address,
// MERGE_DOMAIN_CONFIG, LOG_LEVEL, GRPC_MAX_CONNECTION_AGE and
// GRPC_MAX_CONNECTION_AGE_GRACE mean what they mean there. With
// -metrics-addr (USE_PROMETHEUS) it serves Prometheus metrics, with
// -otlp-endpoint (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT) it exports them over OTLP/HTTP. With
// -grpc-tls (GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)
// it serves over TLS, with -grpc-client-ca (GRPC_CLIENT_TLS_CACERT,
// GRPC_CLIENT_TLS_SAN) requiring client certificates; -redis-tls (REDIS_TLS
// and its REDIS_TLS_ variables) and -redis-auth (REDIS_AUTH) reach Redis.
//
// SIGHUP, or a change in the configuration's directory, reloads it; a
// configuration that does not load changes nothing. SIGHUP, or a change of
// the TLS files, reads them again for new connections; a certificate that
// does not load changes nothing. SIGTERM and SIGINT stop
// the server gracefully.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitotel"
	"github.com/ratekit/ratekit/ratekitprom"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlserver"
	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlservice"
)

// redisClient returns the client of -redis-addr: a single node, Sentinel
// (the master's name first, as envoyproxy/ratelimit's REDIS_URL gives it)
// or Cluster.
func redisClient(s settings) (redis.UniversalClient, error) {
	addrs := strings.Split(s.redisAddr, ",")
	tc, err := redisTLSConfig(s)
	if err != nil {
		return nil, err
	}
	o := &redis.UniversalOptions{Addrs: addrs, TLSConfig: tc}
	if user, pass, ok := strings.Cut(s.redisAuth, ":"); ok {
		o.Username, o.Password = user, pass
	} else {
		o.Password = s.redisAuth
	}
	switch s.redisType {
	case "single":
		if len(addrs) != 1 {
			return nil, fmt.Errorf("-redis-addr %q: one address for a single node", s.redisAddr)
		}
		return redis.NewClient(o.Simple()), nil
	case "sentinel":
		if len(addrs) < 2 {
			return nil, fmt.Errorf("-redis-addr %q: the master's name, then the Sentinels' addresses", s.redisAddr)
		}
		o.MasterName, o.Addrs = addrs[0], addrs[1:]
		return redis.NewFailoverClient(o.Failover()), nil
	case "cluster":
		return redis.NewClusterClient(o.Cluster()), nil
	}
	return nil, fmt.Errorf("-redis-type %q: want single, sentinel or cluster", s.redisType)
}

// otlpMeterProvider returns a meter provider exporting over OTLP/HTTP to
// -otlp-endpoint, every OTEL_METRIC_EXPORT_INTERVAL (60 s by default):
// from the environment, the exporter reads its other OTEL_EXPORTER_OTLP_
// variables (headers, TLS, timeout) as the SDK documents them.
func otlpMeterProvider(s settings) (*sdkmetric.MeterProvider, error) {
	var opts []otlpmetrichttp.Option
	if !s.otlpFromEnv {
		opts = append(opts, otlpmetrichttp.WithEndpointURL(s.otlp))
	}
	exp, err := otlpmetrichttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("-otlp-endpoint %q: %w", s.otlp, err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp))), nil
}

func main() {
	if err := run(os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ratekit-server:", err)
		os.Exit(1)
	}
}

// settings are the flags, with defaults from the environment.
type settings struct {
	config, grpcAddr, redisAddr, logLevel string
	redisType, redisAuth                  string
	grpcTLS                               bool   // -grpc-tls
	grpcCert, grpcKey, grpcClientCA       string // -grpc-tls-cert, -grpc-tls-key, -grpc-client-ca
	grpcClientSAN                         string // -grpc-client-san
	redisTLS, redisTLSSkipHostname        bool   // -redis-tls, -redis-tls-skip-hostname-verification
	redisCA, redisCert, redisKey          string // -redis-tls-ca, -redis-tls-client-cert, -redis-tls-client-key
	metricsAddr, metricsPath              string
	extraTags                             string // -extra-tags
	otlp                                  string // -otlp-endpoint
	otlpFromEnv                           bool   // -otlp-endpoint is the environment's
	nearLimitRatio                        float64
	merge, noHeaders                      bool
	drain, maxAge, maxAgeGrace            time.Duration
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (settings, error) {
	var s settings
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	envBool := func(name string) (bool, error) {
		v := getenv(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s=%q: want true or false", name, v)
		}
		return b, nil
	}
	envDuration := func(name string) (time.Duration, error) {
		v := getenv(name)
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: %w", name, v, err)
		}
		return d, nil
	}
	defConfig := ""
	if root := getenv("RUNTIME_ROOT"); root != "" {
		defConfig = filepath.Join(root, getenv("RUNTIME_SUBDIRECTORY"), env("RUNTIME_APPDIRECTORY", "config"))
	}
	defAddr := net.JoinHostPort(env("GRPC_HOST", "0.0.0.0"), env("GRPC_PORT", "8081"))
	if uds := getenv("GRPC_UDS"); uds != "" {
		defAddr = "unix:" + uds
	}
	defRedis := ""
	if u := getenv("REDIS_URL"); u != "" && strings.EqualFold(env("REDIS_SOCKET_TYPE", "tcp"), "tcp") {
		defRedis = u
	}
	merge, err := envBool("MERGE_DOMAIN_CONFIG")
	if err != nil {
		return s, err
	}
	maxAge, err := envDuration("GRPC_MAX_CONNECTION_AGE")
	if err != nil {
		return s, err
	}
	maxAgeGrace, err := envDuration("GRPC_MAX_CONNECTION_AGE_GRACE")
	if err != nil {
		return s, err
	}
	fs := flag.NewFlagSet("ratekit-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.config, "config", defConfig, "the configuration file, or a directory of *.yaml files (env RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY)")
	fs.StringVar(&s.grpcAddr, "grpc-addr", defAddr, "the gRPC listen address, host:port or unix:/path (env GRPC_HOST, GRPC_PORT, GRPC_UDS)")
	fs.StringVar(&s.redisAddr, "redis-addr", defRedis, "the Redis address; empty: the limits live in this process's memory (env REDIS_URL)")
	fs.StringVar(&s.redisType, "redis-type", strings.ToLower(env("REDIS_TYPE", "single")), "single, sentinel (-redis-addr is master,host:port,...) or cluster (host:port,...) (env REDIS_TYPE)")
	fs.StringVar(&s.redisAuth, "redis-auth", getenv("REDIS_AUTH"), "the Redis password, or user:password (env REDIS_AUTH)")
	useTLS, err := envBool("GRPC_SERVER_USE_TLS")
	if err != nil {
		return s, err
	}
	fs.BoolVar(&s.grpcTLS, "grpc-tls", useTLS, "serve gRPC over TLS with -grpc-tls-cert and -grpc-tls-key, read again on their change and on SIGHUP (env GRPC_SERVER_USE_TLS)")
	fs.StringVar(&s.grpcCert, "grpc-tls-cert", getenv("GRPC_SERVER_TLS_CERT"), "the server's certificate chain, PEM (env GRPC_SERVER_TLS_CERT)")
	fs.StringVar(&s.grpcKey, "grpc-tls-key", getenv("GRPC_SERVER_TLS_KEY"), "the server's private key, PEM (env GRPC_SERVER_TLS_KEY)")
	fs.StringVar(&s.grpcClientCA, "grpc-client-ca", getenv("GRPC_CLIENT_TLS_CACERT"), "require client certificates signed by these CAs, PEM (mTLS) (env GRPC_CLIENT_TLS_CACERT)")
	fs.StringVar(&s.grpcClientSAN, "grpc-client-san", getenv("GRPC_CLIENT_TLS_SAN"), "with -grpc-client-ca, the DNS name a client certificate must carry (env GRPC_CLIENT_TLS_SAN)")
	redisTLS, err := envBool("REDIS_TLS")
	if err != nil {
		return s, err
	}
	redisSkip, err := envBool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
	if err != nil {
		return s, err
	}
	fs.BoolVar(&s.redisTLS, "redis-tls", redisTLS, "connect to Redis over TLS (env REDIS_TLS)")
	fs.StringVar(&s.redisCA, "redis-tls-ca", getenv("REDIS_TLS_CACERT"), "with -redis-tls, the CAs Redis's certificate is checked against, PEM; empty: the system's (env REDIS_TLS_CACERT)")
	fs.StringVar(&s.redisCert, "redis-tls-client-cert", getenv("REDIS_TLS_CLIENT_CERT"), "with -redis-tls, a client certificate to present, PEM (env REDIS_TLS_CLIENT_CERT)")
	fs.StringVar(&s.redisKey, "redis-tls-client-key", getenv("REDIS_TLS_CLIENT_KEY"), "its private key, PEM (env REDIS_TLS_CLIENT_KEY)")
	fs.BoolVar(&s.redisTLSSkipHostname, "redis-tls-skip-hostname-verification", redisSkip, "check Redis's certificate against the CAs but not its name (env REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)")
	defMetrics := ""
	if prom, err := envBool("USE_PROMETHEUS"); err != nil {
		return s, err
	} else if prom {
		defMetrics = env("PROMETHEUS_ADDR", ":9090")
	}
	fs.StringVar(&s.metricsAddr, "metrics-addr", defMetrics, "serve Prometheus metrics on this address; empty: none (env USE_PROMETHEUS, PROMETHEUS_ADDR)")
	ratio := 0.8
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		if ratio, err = strconv.ParseFloat(v, 64); err != nil || ratio <= 0 || ratio >= 1 {
			return s, fmt.Errorf("NEAR_LIMIT_RATIO=%q: want a number between 0 and 1", v)
		}
	}
	fs.Float64Var(&s.nearLimitRatio, "near-limit-ratio", ratio, "units admitted past this part of a limit count in near_limit (and a call leaving less than 1-ratio of it in ratekit_near_limit_total) (env NEAR_LIMIT_RATIO)")
	defOTLP := env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	fs.StringVar(&s.otlp, "otlp-endpoint", defOTLP, "export the metrics (the per descriptor statistics and ratekitotel's) over OTLP/HTTP to this URL (http://collector:4318/v1/metrics); empty: no OTel export (env OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT and the exporter's other OTEL_ variables)")
	fs.StringVar(&s.extraTags, "extra-tags", getenv("EXTRA_TAGS"), "labels added to every Prometheus metric, name:value,name:value (env EXTRA_TAGS; on OTel, OTEL_RESOURCE_ATTRIBUTES)")
	fs.StringVar(&s.metricsPath, "metrics-path", env("PROMETHEUS_PATH", "/metrics"), "the metrics' path (env PROMETHEUS_PATH)")
	fs.BoolVar(&s.merge, "merge", merge, "merge files of one domain instead of refusing them (env MERGE_DOMAIN_CONFIG)")
	fs.BoolVar(&s.noHeaders, "no-headers", false, "leave RateLimit, RateLimit-Policy and Retry-After out of the responses")
	fs.StringVar(&s.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	fs.DurationVar(&s.drain, "drain", 10*time.Second, "how long a stop waits for calls in flight")
	fs.DurationVar(&s.maxAge, "grpc-max-connection-age", maxAge, "close connections after this age, 0 never (env GRPC_MAX_CONNECTION_AGE)")
	fs.DurationVar(&s.maxAgeGrace, "grpc-max-connection-age-grace", maxAgeGrace, "the grace after the age (env GRPC_MAX_CONNECTION_AGE_GRACE)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	s.otlpFromEnv = s.otlp != "" && s.otlp == defOTLP
	if s.config == "" {
		return s, errors.New("no configuration: give -config (or RUNTIME_ROOT)")
	}
	if s.grpcTLS && (s.grpcCert == "" || s.grpcKey == "") {
		return s, errors.New("-grpc-tls: give -grpc-tls-cert and -grpc-tls-key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)")
	}
	if _, err := extraLabels(s.extraTags); err != nil {
		return s, err
	}
	if (s.redisCert == "") != (s.redisKey == "") {
		return s, errors.New("-redis-tls-client-cert and -redis-tls-client-key go together")
	}
	return s, nil
}

// extraLabels parses -extra-tags, name:value pairs separated by commas as
// envoyproxy/ratelimit's EXTRA_TAGS.
func extraLabels(tags string) (prometheus.Labels, error) {
	if tags == "" {
		return nil, nil
	}
	l := prometheus.Labels{}
	for _, kv := range strings.Split(tags, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("-extra-tags %q: want name:value,name:value", tags)
		}
		l[k] = strings.TrimSpace(v)
	}
	return l, nil
}

// registerer returns reg, its metrics labelled by -extra-tags.
func registerer(s settings, reg prometheus.Registerer) prometheus.Registerer {
	if l, _ := extraLabels(s.extraTags); l != nil { // parse checked them
		return prometheus.WrapRegistererWith(l, reg)
	}
	return reg
}

// redisTLSConfig returns the TLS configuration of -redis-tls, nil without
// it.
func redisTLSConfig(s settings) (*tls.Config, error) {
	if !s.redisTLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.redisCert != "" {
		pair, err := tls.LoadX509KeyPair(s.redisCert, s.redisKey)
		if err != nil {
			return nil, fmt.Errorf("-redis-tls-client-cert: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if s.redisCA != "" {
		pem, err := os.ReadFile(s.redisCA)
		if err != nil {
			return nil, fmt.Errorf("-redis-tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-redis-tls-ca %s: no PEM certificate", s.redisCA)
		}
	}
	if s.redisTLSSkipHostname {
		// The chain is still checked, against the CAs, without the name.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis: no server certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg, nil
}

func run(args []string, getenv func(string) string, stderr io.Writer) error {
	s, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.logLevel)); err != nil {
		return fmt.Errorf("-log-level %q: want debug, info, warn or error", s.logLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	so := rlservice.Options{NoHeaders: s.noHeaders, NearLimitRatio: s.nearLimitRatio}
	if s.nearLimitRatio <= 0 || s.nearLimitRatio >= 1 {
		return fmt.Errorf("-near-limit-ratio %v: want a number between 0 and 1", s.nearLimitRatio)
	}
	if s.otlp != "" {
		mp, err := otlpMeterProvider(s)
		if err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = mp.Shutdown(ctx) // the last export
		}()
		so.MeterProvider = mp
		om, err := ratekitotel.New(ratekitotel.WithMeterProvider(mp), ratekitotel.WithNearLimit(1-s.nearLimitRatio))
		if err != nil {
			return err
		}
		so.Observer = om
		log.Info("exporting metrics over OTLP/HTTP", "endpoint", s.otlp)
	}
	var metrics *http.Server
	if s.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		so.Registerer = registerer(s, reg)
		m, err := ratekitprom.New(so.Registerer, ratekitprom.WithNearLimit(1-s.nearLimitRatio))
		if err != nil {
			return err
		}
		if so.Observer != nil {
			so.Observer = observe.Observers(so.Observer, m)
		} else {
			so.Observer = m
		}
		mux := http.NewServeMux()
		mux.Handle(s.metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		metrics = &http.Server{Addr: s.metricsAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	if s.redisAddr != "" {
		c, err := redisClient(s)
		if err != nil {
			return err
		}
		defer c.Close()
		so.Redis = c
		so.OnBreaker = func(open bool) {
			if open {
				log.Warn("Redis is failing: circuit breaker open, the domains' failure policies decide until a probe finds it", "cool_down", rlservice.DefaultBreakerCoolDown)
			} else {
				log.Info("Redis answers again: circuit breaker closed")
			}
		}
	}
	srv, err := rlserver.New(rlserver.Options{Config: s.config, Merge: s.merge, Log: log, Drain: s.drain, Service: so,
		MaxConnectionAge: s.maxAge, MaxConnectionAgeGrace: s.maxAgeGrace, TLS: grpcTLS(s)})
	if err != nil {
		return err
	}
	network, addr := "tcp", s.grpcAddr
	if a, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", a
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = srv.Reload()
				_ = srv.ReloadTLS()
			}
		}
	}()
	if metrics != nil {
		ml, err := net.Listen("tcp", metrics.Addr)
		if err != nil {
			return err
		}
		go func() { _ = metrics.Serve(ml) }()
		defer metrics.Close()
		log.Info("serving metrics", "addr", ml.Addr().String(), "path", s.metricsPath)
	}
	go func() {
		if err := srv.Watch(ctx); err != nil {
			log.Error("not watching the configuration; SIGHUP still reloads it", "error", err)
		}
	}()
	if s.grpcTLS {
		go func() {
			if err := srv.WatchTLS(ctx); err != nil {
				log.Error("not watching the TLS files; SIGHUP still reloads them", "error", err)
			}
		}()
	}
	return srv.Serve(ctx, lis)
}

// grpcTLS returns the server's TLS options, nil without -grpc-tls.
func grpcTLS(s settings) *rlserver.TLS {
	if !s.grpcTLS {
		return nil
	}
	return &rlserver.TLS{CertFile: s.grpcCert, KeyFile: s.grpcKey, ClientCAFile: s.grpcClientCA, ClientSAN: s.grpcClientSAN}
}
