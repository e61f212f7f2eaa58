//go:build linux

package runtime

import (
	"fmt"
	"os"
	"syscall"
)

// sysIdentity is the device, inode and change time of a file: a copy, a
// rewrite or a rename onto the path changes one of them.
func sysIdentity(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%d %d %d.%d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}
