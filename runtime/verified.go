package runtime

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A VerifyCache remembers which .sinf files have passed format.File.Verify,
// by file identity, so that a run checks every tensor checksum the first
// time it opens a file (a copy damaged on its way to the device is caught
// before it runs) and not on every later run of the same file. The identity
// (fileIdentity) is the device, inode, size, modification and change times:
// a new copy, a rewrite or a touch makes a new identity, so the file is
// checked again. Damage that changes none of these (bit rot in place) is not
// caught after the first check; --verify checks every time.
//
// Measured (SmolLM2-135M shape, F16, γ 0.7: a 228 MiB file, 2 busy shared
// CPUs): Verify takes 0.19–0.23 s with the file in the page cache and
// 0.32–0.69 s from disk, against about 1.2 s for a 16-token run; the run
// reads those pages anyway.
//
// The cache is a text file of one identity per line, the most recent last,
// at most verifyCacheEntries; it is rewritten through a temporary file and a
// rename. A cache that cannot be read or written only means checking again.
type VerifyCache struct {
	Path string // the cache file; "" remembers nothing
}

// verifyCacheEntries bounds the cache file.
const verifyCacheEntries = 256

// DefaultVerifyCache returns the cache at $SINF_VERIFY_CACHE, else
// os.UserCacheDir()/sinf/verified (on Linux $XDG_CACHE_HOME or
// ~/.cache), or one that remembers nothing when neither is known.
func DefaultVerifyCache() VerifyCache {
	if p := os.Getenv("SINF_VERIFY_CACHE"); p != "" {
		return VerifyCache{Path: p}
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return VerifyCache{}
	}
	return VerifyCache{Path: filepath.Join(dir, "sinf", "verified")}
}

// Verified reports whether the file at path with stat fi (format.File.Stat:
// taken from the open descriptor, so a path replaced since cannot borrow
// another file's pass; nil: stat the path now) passed Verify before.
func (c VerifyCache) Verified(path string, fi os.FileInfo) bool {
	id, ok := fileIdentity(path, fi)
	if !ok || c.Path == "" {
		return false
	}
	for _, l := range c.lines() {
		if l == id {
			return true
		}
	}
	return false
}

// Remember records that the file at path with stat fi (as for Verified)
// passed Verify. Errors are ignored: the next run checks again.
func (c VerifyCache) Remember(path string, fi os.FileInfo) {
	id, ok := fileIdentity(path, fi)
	if !ok || c.Path == "" {
		return
	}
	lines := []string{}
	for _, l := range c.lines() {
		if l != id {
			lines = append(lines, l)
		}
	}
	lines = append(lines, id)
	lines = lines[max(0, len(lines)-verifyCacheEntries):]
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.Path), ".verified-*")
	if err != nil {
		return
	}
	_, err = tmp.WriteString(strings.Join(lines, "\n") + "\n")
	if err2 := tmp.Close(); err == nil {
		err = err2
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.Path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}

func (c VerifyCache) lines() []string {
	f, err := os.Open(c.Path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() && len(out) < 2*verifyCacheEntries {
		out = append(out, sc.Text())
	}
	return out
}

// fileIdentity is the identity the cache keys on of the file at path with
// stat fi (nil: os.Stat(path)).
func fileIdentity(path string, fi os.FileInfo) (string, bool) {
	if fi == nil {
		var err error
		if fi, err = os.Stat(path); err != nil {
			return "", false
		}
	}
	if !fi.Mode().IsRegular() {
		return "", false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("%s %d %d %s", sysIdentity(fi), fi.Size(), fi.ModTime().UnixNano(), filepath.ToSlash(abs)), true
}
