//go:build unix

package format

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile creates (or opens) the lock file name and takes an exclusive
// flock on it without waiting: ErrBusy if another process holds it, no lock
// (nil) on a filesystem that does not support flock. A
// holder removes the file before it unlocks, so a lock taken on a file that
// is no longer at name is dropped and taken again on the new one.
func lockFile(name string) (*os.File, error) {
	for range 8 {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, ErrBusy
			}
			return nil, nil // a filesystem without flock (ENOLCK, EOPNOTSUPP): no lock
		}
		fi, err1 := f.Stat()
		pi, err2 := os.Stat(name)
		if err1 == nil && err2 == nil && os.SameFile(fi, pi) {
			return f, nil
		}
		f.Close()
	}
	return nil, ErrBusy
}

// unlockFile removes the lock file, then drops the lock (closing the file
// releases the flock).
func unlockFile(f *os.File) {
	if f == nil {
		return
	}
	os.Remove(f.Name())
	f.Close()
}
