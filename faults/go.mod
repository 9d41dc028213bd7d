module github.com/ratekit/ratekit/faults

go 1.26.0

require (
	github.com/ratekit/ratekit v0.1.0
	github.com/ratekit/ratekit/redisstore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/goccy/go-yaml v1.19.2 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace (
	github.com/ratekit/ratekit => ../
	github.com/ratekit/ratekit/redisstore => ../redisstore
)
