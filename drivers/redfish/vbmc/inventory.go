package vbmc

import (
	"net/http"
	"strconv"
	"strings"
)

// What an out-of-band inspection reads besides the system's summaries
// (Ironic's redfish inspect interface, sushy's readers): one processor
// whose threads are the system's CPUs, the system's Ethernet interfaces
// with their MACs (SystemConfig.MACs; none without them), and its
// SecureBoot resource (left out with SystemConfig.NoSecureBoot), whose
// SecureBootEnable a client PATCHes: the machine's next start in UEFI
// mode boots with Secure Boot on (a QEMUMachine on OVMF's Secure Boot
// firmware with Microsoft's keys). The drives are the RAID controller's
// (storage.go).

const processorModel = "bmedge virtual CPU"

func (b *BMC) routeInventory(w http.ResponseWriter, r *http.Request, s *system, segs []string) {
	n := len(segs)
	switch {
	case segs[0] == "Processors" && n == 1:
		b.get(w, r, func() any {
			return collection("#ProcessorCollection.ProcessorCollection", "Processors Collection", sysPath(s)+"/Processors", []string{sysPath(s) + "/Processors/CPU0"})
		})
	case segs[0] == "Processors" && n == 2 && segs[1] == "CPU0":
		b.get(w, r, func() any {
			return map[string]any{
				"@odata.type": "#Processor.v1_7_0.Processor", "@odata.id": sysPath(s) + "/Processors/CPU0", "Id": "CPU0", "Name": "Processor",
				"Socket": "CPU 0", "ProcessorType": "CPU", "ProcessorArchitecture": "x86", "InstructionSet": "x86-64",
				"Manufacturer": "bmedge", "Model": processorModel, "TotalCores": s.cpus, "TotalThreads": s.cpus,
				"Status": map[string]any{"State": "Enabled", "Health": "OK"},
			}
		})
	case segs[0] == "EthernetInterfaces" && len(s.macs) == 0:
		notFound(w, r)
	case segs[0] == "EthernetInterfaces" && n == 1:
		var members []string
		for i := range s.macs {
			members = append(members, sysPath(s)+"/EthernetInterfaces/"+nicID(i))
		}
		b.get(w, r, func() any {
			return collection("#EthernetInterfaceCollection.EthernetInterfaceCollection", "Ethernet Interface Collection", sysPath(s)+"/EthernetInterfaces", members)
		})
	case segs[0] == "EthernetInterfaces" && n == 2:
		for i, mac := range s.macs {
			if segs[1] != nicID(i) {
				continue
			}
			b.get(w, r, func() any {
				return map[string]any{
					"@odata.type": "#EthernetInterface.v1_5_0.EthernetInterface", "@odata.id": sysPath(s) + "/EthernetInterfaces/" + nicID(i),
					"Id": nicID(i), "Name": "Ethernet interface " + nicID(i), "MACAddress": strings.ToUpper(mac), "PermanentMACAddress": strings.ToUpper(mac),
					"SpeedMbps": 10000, "LinkStatus": "LinkUp", "InterfaceEnabled": true,
					"Status": map[string]any{"State": "Enabled", "Health": "OK"},
				}
			})
			return
		}
		notFound(w, r)
	case segs[0] == "SecureBoot" && n == 1 && !s.noSecureBoot:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			writeJSON(w, http.StatusOK, b.secureBootResource(s))
		case http.MethodPatch:
			b.patchSecureBoot(w, r, s)
		default:
			methodNotAllowed(w, r)
		}
	default:
		notFound(w, r)
	}
}

func nicID(i int) string { return "NIC." + strconv.Itoa(i+1) }

func (b *BMC) secureBootResource(s *system) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	current := "Disabled"
	if s.secureBootCurrent {
		current = "Enabled"
	}
	return map[string]any{
		"@odata.type": "#SecureBoot.v1_1_0.SecureBoot", "@odata.id": sysPath(s) + "/SecureBoot", "Id": "SecureBoot", "Name": "UEFI Secure Boot",
		"SecureBootEnable": s.secureBoot, "SecureBootCurrentBoot": current, "SecureBootMode": "UserMode",
	}
}

// patchSecureBoot takes SecureBootEnable (a boolean) and nothing else; it
// applies at the system's next start, as on real servers
// (SecureBootCurrentBoot says what the running boot has).
func (b *BMC) patchSecureBoot(w http.ResponseWriter, r *http.Request, s *system) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var enable *bool
	for k, v := range body {
		switch {
		case strings.HasPrefix(k, "@odata."):
		case k == "SecureBootEnable":
			x, isBool := v.(bool)
			if !isBool {
				writeError(w, http.StatusBadRequest, "PropertyValueTypeError",
					"The value for the property SecureBootEnable is of a different type than the property can accept.", "Send SecureBootEnable as true or false.")
				return
			}
			enable = &x
		default:
			writeError(w, http.StatusBadRequest, "PropertyNotWritable",
				"The property "+k+" is a read only property and cannot be assigned a value.", "Remove the property from the request body and resubmit the request.")
			return
		}
	}
	if enable == nil {
		writeError(w, http.StatusBadRequest, "PropertyMissing", "The property SecureBootEnable is a required property and must be included in the request.",
			"Send SecureBootEnable as true or false.")
		return
	}
	b.mu.Lock()
	s.secureBoot = *enable
	b.log.Info("vbmc secure boot", "system", s.id, "enable", s.secureBoot)
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
