package boot

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// shmDir is where ramDir makes its folders: a RAM filesystem on Linux.
var shmDir = "/dev/shm"

// ramDir makes a private folder (0700) on a RAM filesystem (tmpfs at
// /dev/shm), for files that must never reach a disk; the caller removes
// it.
func ramDir(prefix string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(shmDir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return "", errors.New(shmDir + " is not a RAM filesystem (tmpfs): the boot's credential would be written to a disk")
	}
	return os.MkdirTemp(shmDir, prefix)
}
