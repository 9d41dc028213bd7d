module github.com/ratekit/ratekit/fiberlimit

go 1.26.0

require (
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/ratekit/ratekit v0.1.0
	github.com/valyala/fasthttp v1.51.0
)

require (
	github.com/andybalholm/brotli v1.1.0 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/goccy/go-yaml v1.19.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/tcplisten v1.0.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace github.com/ratekit/ratekit => ../
