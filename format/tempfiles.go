package format

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// temps records the temporary files made by CreateTemp and the write locks
// they hold.
var temps struct {
	sync.Mutex
	names []string
	locks map[string]*os.File // temporary file name → its output's lock
}

// ErrBusy is returned by CreateTemp when another process is writing the
// same output path.
var ErrBusy = errors.New("another process is writing this file")

// CreateTemp starts writing the output file path (spec/sinf.md: no partial
// output). It takes path's write lock, the file ".NAME.lock" beside it held
// with flock(2) until release, so that two processes writing one path do
// not both succeed: the second gets ErrBusy naming the lock. Holding the
// lock, it removes the temporary files of path that a writer killed before
// it could clean up left behind (SIGKILL, a power cut: the lock dies with
// its process). Then it creates the temporary file ".NAME.<digits>.tmp" in
// path's folder and records it, so that RemoveTemps deletes it if the
// process is interrupted before the file is renamed into place.
//
// The caller writes the temporary file, then renames it to path or removes
// it, and then calls release (once; it is safe to defer), which drops the
// lock and removes the lock file. Where flock is not available the lock is
// not taken, and no temporary file is removed.
func CreateTemp(path string) (f *os.File, release func(), err error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	lockName := filepath.Join(dir, "."+base+".lock")
	lock, err := lockFile(lockName)
	if errors.Is(err, ErrBusy) {
		return nil, nil, fmt.Errorf("%w (it holds %s): wait for it to finish, or write to another path", ErrBusy, lockName)
	}
	if err != nil {
		if _, serr := os.Stat(dir); serr != nil { // name the folder, not the lock file in it
			return nil, nil, fmt.Errorf("writing %s: its folder: %w", path, serr)
		}
		return nil, nil, err
	}
	if lock != nil {
		removeStale(dir, base)
	}
	if f, err = os.CreateTemp(dir, "."+base+".*.tmp"); err != nil {
		unlockFile(lock)
		return nil, nil, err
	}
	name := f.Name()
	temps.Lock()
	temps.names = append(temps.names, name)
	if lock != nil {
		if temps.locks == nil {
			temps.locks = map[string]*os.File{}
		}
		temps.locks[name] = lock
	}
	temps.Unlock()
	var once sync.Once
	return f, func() {
		once.Do(func() {
			temps.Lock()
			delete(temps.locks, name)
			temps.Unlock()
			unlockFile(lock)
		})
	}, nil
}

// removeStale removes the temporary files of base in dir: ".BASE.<digits>.tmp"
// (CreateTemp's names) and ".BASE.tmp-<digits>" (score files' names before
// the lock). Only a lock holder calls it, so no live writer owns them.
func removeStale(dir, base string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	digits := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789") == ""
	}
	for _, e := range entries {
		n := e.Name()
		rest, ok := strings.CutPrefix(n, "."+base+".")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if mid, ok := strings.CutSuffix(rest, ".tmp"); ok && digits(mid) {
			os.Remove(filepath.Join(dir, n))
		} else if num, ok := strings.CutPrefix(rest, "tmp-"); ok && digits(num) {
			os.Remove(filepath.Join(dir, n))
		}
	}
}

// RemoveTemps deletes every file made by CreateTemp that still exists under
// its temporary name, and the lock files of those not yet released.
// Commands call it on SIGINT and SIGTERM.
func RemoveTemps() {
	temps.Lock()
	defer temps.Unlock()
	for _, n := range temps.names {
		os.Remove(n)
		if l := temps.locks[n]; l != nil {
			unlockFile(l)
		}
	}
	temps.names, temps.locks = nil, nil
}
