package protocol

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// A bundle carries several messages of one site across the WAN in one
// MQTT publish, compressed. The edge agent sends its results, hellos,
// heartbeats and reports as bundles on its site's bmc/evt topic; the
// coordinator sends everything for a site whose agent relays its ramdisks
// (presence with Relay) as bundles on the site's bmc/cmd topic. Each
// record keeps the topic it would have had on its own, so the receiver
// handles it exactly as if it had come there. Bundling saves the per-
// publish MQTT, TCP and IP overhead and lets the repeated keys, node
// names and ids of a site's messages compress together.
//
// Wire form: the two bytes BundleMagic, then a raw DEFLATE stream (RFC
// 1951) compressed with BundleDictionary as its preset dictionary, of
// records: uvarint length + topic below "bm/v1/site/SITE/", uvarint length
// + the message's JSON. A JSON message starts with '{', so the first byte
// tells a bundle from a message.

// BundleMagic starts every bundle; its second byte is the bundle format
// version, which also names the dictionary.
var BundleMagic = [2]byte{0x00, 0x01}

// MaxBundleRecords bounds the records of one bundle.
const MaxBundleRecords = 4096

// MaxBundleBytes bounds a bundle's decompressed records (topics, lengths
// and messages); it is the size of one message, so that a bundle fits
// every broker that takes the largest message.
const MaxBundleBytes = MaxMessageBytes

// BundleDictionary primes the compressor with what every bundle repeats.
// It is part of the wire format of bundle version 1: never change it
// without a new BundleMagic version.
const BundleDictionary = `node/` + `/evt` + `/cmd` + `bmc/evt` + `bmc/cmd` +
	`{"v":1,"kind":"heartbeats","id":"","site":"","sent":"","queued":` +
	`{"v":1,"kind":"heartbeat","id":"","site":"","node":"","sent":"","token":"","running":"","progress":0.` +
	`,"detail":"` +
	`{"v":1,"kind":"hello","id":"","site":"","node":"","sent":"","boot_id":"","clean_steps":[` +
	`{"interface":"deploy","step":"erase_devices_metadata","priority":99,"abortable":true},` +
	`{"interface":"deploy","step":"erase_devices","priority":10,"abortable":true},` +
	`{"interface":"deploy","step":"inspect_hardware","abortable":true}],` +
	`"deploy_steps":[{"interface":"deploy","step":"write_image","priority":80}]}` +
	`{"v":1,"kind":"power","id":"","site":"","node":"","sent":"","power_state":"power off"}` +
	`{"v":1,"kind":"ack","id":"ack","sent":"","ack_ids":["",""]}` +
	`{"v":1,"kind":"welcome","id":"","site":"","node":"","sent":"","token":"","boot_id":""}` +
	`{"v":1,"kind":"command","id":"","site":"","node":"","sent":"","token":"","action":"run_step","deadline":"",` +
	`"step":{"interface":"deploy","step":"write_image","args":{"image_source":"http://","image_checksum":"sha256:"},"priority":` +
	`{"v":1,"kind":"command","id":"","site":"","node":"","sent":"","action":"oob_step","deadline":"","step":{"interface":"deploy","step":"prepare_instance_boot","priority":60},"driver":"redfish"}` +
	`{"v":1,"kind":"command","id":"","site":"","node":"","sent":"","action":"boot_device","deadline":"","args":{"device":"disk"},"driver":"ipmi"}` +
	`{"v":1,"kind":"command","id":"","site":"","node":"","sent":"","action":"power","deadline":"",` +
	`"args":{"agent_password":"","agent_username":"node:","boot_macs":[""],"state":"rebooted"},"driver":"fake",` +
	`"driver_info":{"redfish_address":"https://","redfish_system_id":"/redfish/v1/Systems/","redfish_username":"","redfish_password":"","ipmi_address":"","ipmi_username":"","ipmi_password":""}}` +
	`{"v":1,"kind":"result","id":"","site":"","node":"","sent":"","command_id":"","ok":true,"error":"","data":{"power_state":"power on"}}` +
	`{"v":1,"kind":"result","id":"","site":"","node":"","sent":"","token":"","command_id":"","ok":true}`

// BundleRecord is one message of a bundle with the topic it belongs to.
type BundleRecord struct {
	Topic   string
	Payload []byte
}

// IsBundle tells whether a payload is a bundle (rather than a message).
func IsBundle(b []byte) bool {
	return len(b) >= 2 && b[0] == BundleMagic[0]
}

// SitePrefix is the topic prefix of a site's tree: bundle records name
// their topic below it.
func SitePrefix(site string) string { return TopicPrefix + "/site/" + site + "/" }

// BundleSize is what a record adds to a bundle's decompressed size.
func BundleSize(site string, r BundleRecord) int {
	return 2*binary.MaxVarintLen32 + len(r.Topic) - len(SitePrefix(site)) + len(r.Payload)
}

// EncodeBundle packs records of one site into a bundle. Every record's
// topic must be in the site's tree and its payload a message (not a
// bundle); the records together must stay within MaxBundleRecords and
// MaxBundleBytes. level is a compress/flate level (flate.BestSpeed for a
// busy sender).
func EncodeBundle(site string, records []BundleRecord, level int) ([]byte, error) {
	if len(records) == 0 || len(records) > MaxBundleRecords {
		return nil, fmt.Errorf("a bundle holds 1 to %d messages, not %d", MaxBundleRecords, len(records))
	}
	prefix := SitePrefix(site)
	var raw bytes.Buffer
	var n [binary.MaxVarintLen64]byte
	for _, r := range records {
		rest, ok := strings.CutPrefix(r.Topic, prefix)
		if !ok || rest == "" {
			return nil, fmt.Errorf("topic %q is not in site %q's tree", r.Topic, site)
		}
		if IsBundle(r.Payload) || len(r.Payload) == 0 {
			return nil, fmt.Errorf("record for %q is not a message", r.Topic)
		}
		raw.Write(n[:binary.PutUvarint(n[:], uint64(len(rest)))])
		raw.WriteString(rest)
		raw.Write(n[:binary.PutUvarint(n[:], uint64(len(r.Payload)))])
		raw.Write(r.Payload)
	}
	if raw.Len() > MaxBundleBytes {
		return nil, fmt.Errorf("bundle of %d bytes is larger than the limit of %d", raw.Len(), MaxBundleBytes)
	}
	if level < flate.HuffmanOnly || level > flate.BestCompression {
		return nil, fmt.Errorf("compression level %d is not a compress/flate level", level)
	}
	var out bytes.Buffer
	out.Grow(raw.Len()/3 + 64)
	out.Write(BundleMagic[:])
	// A compressor is hundreds of KiB of tables: one per bundle would
	// keep the garbage collector busy on a coordinator of many sites.
	pool := &writers[level-flate.HuffmanOnly]
	w, _ := pool.Get().(*flate.Writer)
	if w == nil {
		var err error
		if w, err = flate.NewWriterDict(&out, level, []byte(BundleDictionary)); err != nil {
			return nil, err
		}
	} else {
		w.Reset(&out) // keeps the level and the dictionary
	}
	defer pool.Put(w)
	if _, err := w.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// writers pools compressors by level (flate.HuffmanOnly … BestCompression),
// readers the decompressors; all with BundleDictionary.
var (
	writers [flate.BestCompression - flate.HuffmanOnly + 1]sync.Pool
	readers sync.Pool
)

// DecodeBundle unpacks a bundle that came on site's topic. It reads at
// most MaxBundleBytes of decompressed data and MaxBundleRecords records,
// whatever the bundle claims, and refuses records whose topic is not a
// topic of this protocol in the site's tree, and records that are
// bundles themselves. The payloads are not decoded: each goes through
// Decode where it is handled, as a message sent on its own would.
func DecodeBundle(site string, b []byte) ([]BundleRecord, error) {
	if len(b) > MaxMessageBytes+1024 {
		return nil, fmt.Errorf("bundle of %d bytes is larger than the limit of %d", len(b), MaxMessageBytes+1024)
	}
	if len(b) < 2 || b[0] != BundleMagic[0] {
		return nil, errors.New("not a bundle")
	}
	if b[1] != BundleMagic[1] {
		return nil, fmt.Errorf("bundle format %d is not supported (this program speaks %d): update the older of the edge agent and the coordinator", b[1], BundleMagic[1])
	}
	var fr io.ReadCloser
	if r, ok := readers.Get().(io.ReadCloser); ok {
		if err := r.(flate.Resetter).Reset(bytes.NewReader(b[2:]), []byte(BundleDictionary)); err != nil {
			return nil, fmt.Errorf("bundle does not decompress: %v", err)
		}
		fr = r
	} else {
		fr = flate.NewReaderDict(bytes.NewReader(b[2:]), []byte(BundleDictionary))
	}
	defer readers.Put(fr)
	raw, err := io.ReadAll(io.LimitReader(fr, MaxBundleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("bundle does not decompress: %v", err)
	}
	if len(raw) > MaxBundleBytes {
		return nil, fmt.Errorf("bundle decompresses to more than the limit of %d bytes", MaxBundleBytes)
	}
	prefix := SitePrefix(site)
	var out []BundleRecord
	next := func(what string) ([]byte, error) {
		l, k := binary.Uvarint(raw)
		if k <= 0 || l > uint64(len(raw)-k) {
			return nil, fmt.Errorf("bundle record %d: %s length is cut short or malformed", len(out)+1, what)
		}
		v := raw[k : k+int(l)]
		raw = raw[k+int(l):]
		return v, nil
	}
	for len(raw) > 0 {
		if len(out) == MaxBundleRecords {
			return nil, fmt.Errorf("bundle holds more than %d messages", MaxBundleRecords)
		}
		t, err := next("topic")
		if err != nil {
			return nil, err
		}
		p, err := next("message")
		if err != nil {
			return nil, err
		}
		topic := prefix + string(t)
		s, _, _, err := ParseTopic(topic)
		if err != nil || s != site {
			return nil, fmt.Errorf("bundle record %d: topic %q is not a topic of site %q", len(out)+1, topic, site)
		}
		if len(p) == 0 || IsBundle(p) {
			return nil, fmt.Errorf("bundle record %d for %q is not a message", len(out)+1, topic)
		}
		out = append(out, BundleRecord{Topic: topic, Payload: p})
	}
	if len(out) == 0 {
		return nil, errors.New("bundle holds no message")
	}
	return out, nil
}
