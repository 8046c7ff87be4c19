package protocol

import (
	"bytes"
	"testing"
)

// Seeds are messages of every kind as the three programs really send
// them (shapes from fsm, agent and lib/session), plus the malformed
// ones TestDecodeRejectsWithReason names, so that `go test` alone checks
// them and the fuzzer starts from every branch of Validate.
var decodeSeeds = []string{
	`{"v":1,"kind":"command","id":"c1","site":"s1","node":"6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f","sent":"2030-01-01T00:00:00Z","action":"power","deadline":"2030-01-01T00:05:00Z","args":{"state":"rebooted","agent_username":"node-1","agent_password":"p"},"driver":"fake","driver_info":{"fake_password":"x"}}`,
	`{"v":1,"kind":"command","id":"c2","site":"s1","node":"n1","sent":"2030-01-01T00:00:00Z","action":"boot_device","deadline":"2030-01-01T00:05:00Z","args":{"device":"pxe"},"driver":"ipmi","driver_info":{"ipmi_address":"10.0.0.5"}}`,
	`{"v":1,"kind":"command","id":"c3","site":"s1","node":"n1","sent":"2030-01-01T00:00:00Z","action":"validate","deadline":"2030-01-01T00:05:00Z","driver":"redfish","driver_info":{"redfish_address":"https://bmc"}}`,
	`{"v":1,"kind":"command","id":"c4","site":"s1","node":"n1","sent":"2030-01-01T00:00:00Z","action":"run_step","deadline":"2030-01-01T00:30:00Z","token":"t0k","step":{"interface":"deploy","step":"write_image","args":{"image_source":"http://img/x.raw.zst","image_os_hash_algo":"sha256","image_os_hash_value":"00","root_device":{"size":">= 100","rotational":false}},"priority":80}}`,
	`{"v":1,"kind":"command","id":"c5","site":"s1","node":"n1","sent":"2030-01-01T00:00:00Z","action":"oob_step","deadline":"2030-01-01T00:05:00Z","step":{"interface":"management","step":"fake_reset_bmc","args":{"delay":1}}}`,
	`{"v":1,"kind":"command","id":"c6","site":"s1","node":"n1","sent":"2030-01-01T00:00:00Z","action":"abort_step","deadline":"2030-01-01T00:05:00Z","token":"t0k","args":{"command_id":"c4"}}`,
	`{"v":1,"kind":"command","id":"c8","site":"s1","node":"n1","sent":"2030-01-01T00:00:00Z","action":"oob_step","deadline":"2030-01-01T00:05:00Z","step":{"interface":"deploy","step":"prepare_instance_boot","priority":60},"steps":[{"interface":"deploy","step":"prepare_instance_boot","priority":60},{"interface":"deploy","step":"tear_down_agent","priority":40},{"interface":"deploy","step":"boot_instance","priority":20}],"driver":"ipmi"}`,
	`{"v":1,"kind":"command","id":"c9","site":"s1","node":"n1","sent":"2030-01-01T00:00:00Z","action":"power","deadline":"2030-01-01T00:05:00Z","args":{"state":"rebooted","boot_device":"pxe","agent_username":"node:n1","agent_password":"p"},"driver":"fake"}`,
	`{"v":1,"kind":"result","id":"r4","site":"s1","node":"n1","sent":"2030-01-01T00:01:00Z","command_id":"c8","error":"step deploy.tear_down_agent: BMC said no","data":{"steps_done":1}}`,
	`{"v":1,"kind":"presence","site":"s1","sent":"2030-01-01T00:00:00Z","online":true,"relay":true}`,
	`{"v":1,"kind":"result","id":"r1","site":"s1","node":"n1","sent":"2030-01-01T00:01:00Z","command_id":"c1","ok":true}`,
	`{"v":1,"kind":"result","id":"r2","site":"s1","node":"n1","sent":"2030-01-01T00:01:00Z","token":"t0k","command_id":"c4","error":"checksum mismatch"}`,
	`{"v":1,"kind":"result","id":"r3","site":"s1","node":"n1","sent":"2030-01-01T00:01:00Z","token":"t0k","command_id":"c7","ok":true,"data":{"inventory":{"cpu":{"count":4,"architecture":"x86_64"},"memory":{"physical_mb":8192},"disks":[{"name":"/dev/vda","size":21474836480,"rotational":true}]},"properties":{"cpus":4,"memory_mb":8192,"local_gb":20,"cpu_arch":"x86_64"},"summary":"vda zeroed, 3 samples verified"}}`,
	`{"v":1,"kind":"ack","sent":"2030-01-01T00:01:00Z","ack_ids":["r1","r2"]}`,
	`{"v":1,"kind":"hello","id":"h1","site":"s1","node":"n1","sent":"2030-01-01T00:00:30Z","boot_id":"b1","clean_steps":[{"interface":"deploy","step":"erase_devices_metadata","priority":99,"abortable":true},{"interface":"deploy","step":"erase_devices","priority":10,"abortable":true},{"interface":"deploy","step":"inspect_hardware","abortable":true}],"deploy_steps":[{"interface":"deploy","step":"write_image","priority":80}]}`,
	`{"v":1,"kind":"welcome","id":"w1","site":"s1","node":"n1","sent":"2030-01-01T00:00:31Z","token":"t0k","boot_id":"b1"}`,
	`{"v":1,"kind":"heartbeat","id":"hb1","site":"s1","node":"n1","sent":"2030-01-01T00:00:40Z","token":"t0k","running":"c4","progress":0.5,"detail":"/dev/vda"}`,
	`{"v":1,"kind":"presence","site":"s1","sent":"2030-01-01T00:00:00Z","online":true}`,
	`{"v":1,"kind":"presence","site":"s1","sent":"2030-01-01T00:00:00+02:00"}`,
	`{"v":1,`,
	`{"v":0,"kind":"result","id":"a"}`,
	`{"v":1,"id":"a","kind":"gossip"}`,
	`{"v":1,"kind":"command","id":"a","action":"power","node":"n","deadline":"2030-01-01T00:00:00Z","args":{"state":"melt"}}`,
	`{"v":1,"kind":"heartbeat","id":"a","node":"n","token":"t","progress":2}`,
	`null`,
	`[]`,
}

// FuzzDecode feeds arbitrary bytes to Decode, the function every program
// calls on an MQTT payload before anything else looks at it. Decode must
// never panic, and a message it accepts must survive Encode and a second
// Decode unchanged: the coordinator re-encodes stored commands (resends,
// held results) and agents re-encode results from their outboxes, so a
// message that changed or became invalid on the way would be lost or
// misread after a restart. The property is checked on the encoded bytes
// (Encode is a fixed point after one trip), which is what travels.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode returned a message with error %v", err)
			}
			return
		}
		if m.V != Version {
			t.Fatalf("Decode accepted version %d", m.V)
		}
		b1, err := Encode(m)
		if err != nil {
			t.Fatalf("a decoded message does not encode: %v\ninput: %q", err, b)
		}
		m2, err := Decode(b1)
		if err != nil {
			t.Fatalf("an encoded message does not decode: %v\nencoded: %s\ninput: %q", err, b1, b)
		}
		b2, err := Encode(m2)
		if err != nil {
			t.Fatalf("second encode: %v", err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("message changed on a round trip:\nfirst:  %s\nsecond: %s\ninput: %q", b1, b2, b)
		}
		if !m.Sent.Equal(m2.Sent) || !m.Deadline.Equal(m2.Deadline) {
			t.Fatalf("times changed on a round trip: %v/%v -> %v/%v", m.Sent, m.Deadline, m2.Sent, m2.Deadline)
		}
	})
}

// FuzzParseTopic feeds arbitrary topic names to ParseTopic, which both
// the coordinator and the edge agent call on every message they receive
// before deciding whose message it is. A topic it accepts must be exactly
// the topic the constructors build from the parts it returned: otherwise
// a message could be attributed to another site or node than the one the
// broker's ACL let publish it.
func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{
		NodeEvtTopic("s1", "6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"), NodeCmdTopic("s1", "n1"), NodePresenceTopic("s1", "n1"),
		BMCCmdTopic("s2"), BMCEvtTopic("s2"), SitePresenceTopic("s3"),
		"bm/v2/site/s/bmc/cmd", "bm/v1/site/s/node/n/other", "bm/v1/site/s", "bm/v1/site//presence", "bm/v1/site/s/node//evt",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		site, node, leaf, err := ParseTopic(topic)
		if err != nil {
			if site != "" || node != "" || leaf != "" {
				t.Fatalf("ParseTopic(%q) failed but returned parts %q %q %q", topic, site, node, leaf)
			}
			return
		}
		var rebuilt string
		switch leaf {
		case "presence":
			rebuilt = SitePresenceTopic(site)
			if node != "" {
				rebuilt = NodePresenceTopic(site, node)
			}
		case "bmc/cmd":
			rebuilt = BMCCmdTopic(site)
		case "bmc/evt":
			rebuilt = BMCEvtTopic(site)
		case "cmd":
			rebuilt = NodeCmdTopic(site, node)
		case "evt":
			rebuilt = NodeEvtTopic(site, node)
		default:
			t.Fatalf("ParseTopic(%q) returned unknown leaf %q", topic, leaf)
		}
		if rebuilt != topic {
			t.Fatalf("ParseTopic(%q) = site %q node %q leaf %q, which builds %q", topic, site, node, leaf, rebuilt)
		}
	})
}
