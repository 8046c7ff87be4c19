//go:build !unix

package netbudget

import "net"

func nofile() int { return 1 << 30 }

func fdOf(net.Conn) int { return -1 }
