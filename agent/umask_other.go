//go:build !unix

package agent

// privateUmask has nothing to do where there is no umask.
func privateUmask() {}
