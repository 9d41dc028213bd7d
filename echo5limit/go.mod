module github.com/ratekit/ratekit/echo5limit

go 1.26.0

require (
	github.com/labstack/echo/v5 v5.4.4
	github.com/ratekit/ratekit v0.1.0
)

require (
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/goccy/go-yaml v1.19.2 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace github.com/ratekit/ratekit => ../
