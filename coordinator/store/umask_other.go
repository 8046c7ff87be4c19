//go:build !unix

package store

// privateUmask has nothing to do where there is no umask.
func privateUmask() {}
