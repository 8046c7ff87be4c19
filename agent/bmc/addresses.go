package bmc

import (
	"strings"
)

// Addresses are the BMC addresses of the driver_info the set has seen
// (redfish_address, ipmi_address...): the edge agent's fetch rule
// refuses them (agent/fetchrule), so that no fetch on an operator's
// behalf reaches a BMC.
func (s *Set) Addresses() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, info := range s.info {
		for k, v := range info {
			if a, ok := v.(string); ok && a != "" && strings.HasSuffix(k, "_address") {
				out = append(out, a)
			}
		}
	}
	return out
}
