//go:build !linux

package netboot

import (
	"errors"
	"net"
)

// linkSender: sending to a MAC address needs Linux's packet sockets;
// elsewhere answers that would go to a client's MAC are broadcast.
type linkSender struct{}

func openLinkSender(string, net.IP) (*linkSender, error) {
	return nil, errors.New("sending to a MAC address needs Linux")
}

func (l *linkSender) Close() error                                { return nil }
func (l *linkSender) send(net.HardwareAddr, net.IP, []byte) error { return nil }

// startRA: router advertisements to iPXE need Linux's packet sockets.
func (s *Server) startRA() {}
