//go:build !linux

package boot

import "errors"

func ramDir(string) (string, error) {
	return "", errors.New("UEFI HTTP boot ISOs are built on Linux only (a RAM filesystem at /dev/shm)")
}
