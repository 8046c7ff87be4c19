//go:build !unix

package kvstore

// privateUmask has nothing to do where there is no umask.
func privateUmask() {}
