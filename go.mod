module github.com/ratekit/ratekit

go 1.26.0

require (
	github.com/dunglas/httpsfv v1.1.2
	github.com/fsnotify/fsnotify v1.10.1
	github.com/goccy/go-yaml v1.19.2
	github.com/hashicorp/golang-lru/v2 v2.0.7
	golang.org/x/net v0.62.0
	golang.org/x/text v0.44.0
	golang.org/x/time v0.16.0
)

require golang.org/x/sys v0.49.0 // indirect
