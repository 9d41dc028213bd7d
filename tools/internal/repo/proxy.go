package repo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Publish writes every released module, at version v, to a module proxy in
// the directory dir, laid out as the GOPROXY protocol says
// (<escaped module path>/@v/list, v.info, v.mod, v.zip), so that
// GOPROXY=file://dir serves it. The modules' files are those of the git
// revision rev, exactly what a tag on it would publish; when rev is empty,
// they are the working tree's files that git would commit (tracked or
// untracked, and not ignored). A nested module without a LICENSE gets the
// root's, as the public proxy gives it.
func (r *Repo) Publish(dir, rev, v string) ([]module.Version, error) {
	if err := CheckVersion(v); err != nil {
		return nil, err
	}
	when := time.Now().UTC()
	if rev != "" {
		out, err := Run(r.Root, os.Environ(), "git", "log", "-1", "--format=%cI", rev)
		if err != nil {
			return nil, fmt.Errorf("repo: %w", err)
		}
		if when, err = time.Parse(time.RFC3339, strings.TrimSpace(string(out))); err != nil {
			return nil, fmt.Errorf("repo: commit time of %s: %w", rev, err)
		}
	}
	var published []module.Version
	for _, m := range r.Released() {
		mv := module.Version{Path: m.Path, Version: v}
		if err := r.publish(dir, rev, m, mv, when); err != nil {
			return published, fmt.Errorf("repo: publish %s@%s: %w", m.Path, v, err)
		}
		published = append(published, mv)
	}
	return published, nil
}

func (r *Repo) publish(dir, rev string, m Module, mv module.Version, when time.Time) error {
	escaped, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	subdir := m.Dir
	if subdir == "." {
		subdir = ""
	}
	var gomod []byte
	zf, err := os.Create(filepath.Join(vdir, mv.Version+".zip"))
	if err != nil {
		return err
	}
	if rev != "" {
		err = zip.CreateFromVCS(zf, mv, r.Root, rev, subdir)
		if err == nil {
			gomod, err = Run(r.Root, os.Environ(), "git", "show", rev+":"+path.Join(subdir, "go.mod"))
		}
	} else {
		var files []zip.File
		files, err = r.worktreeFiles(subdir)
		if err == nil {
			err = zip.Create(zf, mv, files)
		}
		if err == nil {
			gomod, err = os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(m.Dir), "go.mod"))
		}
	}
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, when})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		mv.Version + ".mod":  gomod,
		mv.Version + ".info": info,
		"list":               []byte(mv.Version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// worktreeFiles lists the files git would commit under subdir ("" for the
// whole tree), named relative to subdir; zip.Create leaves out the nested
// modules' files.
func (r *Repo) worktreeFiles(subdir string) ([]zip.File, error) {
	args := []string{"ls-files", "-z", "--cached", "--others", "--exclude-standard"}
	if subdir != "" {
		args = append(args, "--", subdir)
	}
	out, err := Run(r.Root, os.Environ(), "git", args...)
	if err != nil {
		return nil, err
	}
	var files []zip.File
	license := false
	for name := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		rel := name
		if subdir != "" {
			rel = strings.TrimPrefix(name, subdir+"/")
		}
		full := filepath.Join(r.Root, filepath.FromSlash(name))
		info, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return nil, err
		}
		files = append(files, diskFile{name: rel, path: full, info: info})
		license = license || rel == "LICENSE"
	}
	if !license && subdir != "" {
		full := filepath.Join(r.Root, "LICENSE")
		if info, err := os.Lstat(full); err == nil {
			files = append(files, diskFile{name: "LICENSE", path: full, info: info})
		}
	}
	return files, nil
}

// diskFile is a zip.File read from disk.
type diskFile struct {
	name string
	path string
	info fs.FileInfo
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

// ProxyEnv is the environment for a go command that sees one module alone
// and fetches this repository's modules from the proxy in dir, without
// asking the checksum database about them (the tree's hashes are not a
// release's). The module cache is modcache, a fresh one: a version of this
// repository's modules stands for a different tree at every commit, and a
// module cache never fetches a version it holds again. Other modules come
// from the usual cache (cache, go env GOMODCACHE), as a proxy, before the
// usual proxy (goproxy, go env GOPROXY).
func ProxyEnv(dir, modcache, cache, goproxy string, extra ...string) []string {
	env := GoEnv(
		"GOPROXY=file://"+filepath.ToSlash(dir)+",file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download"))+","+goproxy,
		"GONOSUMDB="+noSumDB(),
		"GOMODCACHE="+modcache,
	)
	return append(env, extra...)
}

func noSumDB() string {
	if v := os.Getenv("GONOSUMDB"); v != "" {
		return v + "," + RootPath
	}
	return RootPath
}

// GoEnvValue returns go env's value for the variable name.
func GoEnvValue(name string) (string, error) {
	out, err := Run(".", os.Environ(), "go", "env", name)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(out)), nil
}
