package main

import (
	"os"
	"path/filepath"
	"testing"
)

const unreleased = `# Changelog

Intro.

## [Unreleased]

### Added

- A thing.

[Unreleased]: https://github.com/ratekit/ratekit/commits/main
`

func TestChangelog(t *testing.T) {
	cases := []struct {
		name, in, v, previous, want string
	}{
		{"first release", unreleased, "v0.1.0", "", `# Changelog

Intro.

## [Unreleased]

## [0.1.0] - 2026-02-03

### Added

- A thing.

[Unreleased]: https://github.com/ratekit/ratekit/compare/v0.1.0...HEAD
[0.1.0]: https://github.com/ratekit/ratekit/releases/tag/v0.1.0
`},
		{"second release", `# Changelog

## [Unreleased]

### Fixed

- Another thing.

## [0.1.0] - 2026-01-01

### Added

- A thing.

[Unreleased]: https://github.com/ratekit/ratekit/compare/v0.1.0...HEAD
[0.1.0]: https://github.com/ratekit/ratekit/releases/tag/v0.1.0
`, "v0.2.0", "v0.1.0", `# Changelog

## [Unreleased]

## [0.2.0] - 2026-02-03

### Fixed

- Another thing.

## [0.1.0] - 2026-01-01

### Added

- A thing.

[Unreleased]: https://github.com/ratekit/ratekit/compare/v0.2.0...HEAD
[0.2.0]: https://github.com/ratekit/ratekit/compare/v0.1.0...v0.2.0
[0.1.0]: https://github.com/ratekit/ratekit/releases/tag/v0.1.0
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "CHANGELOG.md")
			if err := os.WriteFile(file, []byte(c.in), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := changelog(file, c.v, c.previous, "2026-02-03"); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

func TestChangelogEmpty(t *testing.T) {
	file := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(file, []byte("# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-01-01\n\n- A thing.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := changelog(file, "v0.2.0", "v0.1.0", "2026-02-03"); err == nil {
		t.Error("a release with nothing under [Unreleased] did not fail")
	}
}
