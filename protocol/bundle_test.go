package protocol

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

func sampleRecords(site string, n int) []BundleRecord {
	var rs []BundleRecord
	for i := range n {
		node := fmt.Sprintf("6f0c1c8e-1a2b-4c3d-8e9f-%012d", i)
		rs = append(rs, BundleRecord{Topic: NodeEvtTopic(site, node),
			Payload: fmt.Appendf(nil, `{"v":1,"kind":"result","id":"r%d","site":%q,"node":%q,"sent":"2030-01-01T00:01:00Z","command_id":"c%d","ok":true}`, i, site, node, i)})
		rs = append(rs, BundleRecord{Topic: BMCEvtTopic(site),
			Payload: fmt.Appendf(nil, `{"v":1,"kind":"power","id":"p%d","site":%q,"node":%q,"sent":"2030-01-01T00:01:00Z","power_state":"power on"}`, i, site, node)})
	}
	return rs
}

func TestBundleRoundTrip(t *testing.T) {
	for _, n := range []int{1, 50} {
		rs := sampleRecords("site1", n)
		raw := 0
		for _, r := range rs {
			raw += len(r.Payload)
		}
		b, err := EncodeBundle("site1", rs, flate.BestSpeed)
		if err != nil {
			t.Fatal(err)
		}
		if !IsBundle(b) {
			t.Fatal("an encoded bundle is not recognised as one")
		}
		if len(b) >= raw {
			t.Errorf("%d messages of %d bytes made a bundle of %d bytes: nothing saved", len(rs), raw, len(b))
		}
		got, err := DecodeBundle("site1", b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(rs) {
			t.Fatalf("%d records back, want %d", len(got), len(rs))
		}
		for i := range rs {
			if got[i].Topic != rs[i].Topic || !bytes.Equal(got[i].Payload, rs[i].Payload) {
				t.Fatalf("record %d: got %q %s, want %q %s", i, got[i].Topic, got[i].Payload, rs[i].Topic, rs[i].Payload)
			}
		}
		t.Logf("%d messages, %d bytes: bundle of %d bytes", len(rs), raw, len(b))
	}
	if IsBundle([]byte(`{"v":1}`)) {
		t.Error("a JSON message is taken for a bundle")
	}
}

// rawBundle compresses records exactly as given, so that a test can make
// bundles EncodeBundle would refuse to make.
func rawBundle(t *testing.T, version byte, raw []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	out.Write([]byte{BundleMagic[0], version})
	w, _ := flate.NewWriterDict(&out, flate.BestCompression, []byte(BundleDictionary))
	w.Write(raw)
	w.Close()
	return out.Bytes()
}

func rec(topic, payload string) []byte {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(topic)))
	b = append(b, topic...)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

func TestBundleRefusals(t *testing.T) {
	ok := `{"v":1,"kind":"ack","sent":"2030-01-01T00:01:00Z","ack_ids":["r1"]}`
	var tooMany []byte
	for range MaxBundleRecords + 1 {
		tooMany = append(tooMany, rec("bmc/cmd", ok)...)
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"a message", []byte(ok), "not a bundle"},
		{"newer format", rawBundle(t, 9, rec("bmc/cmd", ok)), "bundle format 9 is not supported"},
		{"not deflate", append(BundleMagic[:], 0xff, 0xff, 0xff), "does not decompress"},
		{"empty", rawBundle(t, 1, nil), "holds no message"},
		{"cut short", rawBundle(t, 1, rec("bmc/cmd", ok)[:20]), "cut short"},
		{"huge length", rawBundle(t, 1, append(rec("bmc/cmd", ok), 0xff, 0xff, 0xff, 0xff, 0x0f)), "cut short or malformed"},
		{"another site", rawBundle(t, 1, rec("../site2/bmc/cmd", ok)), "not a topic of site"},
		{"site prefix escape", rawBundle(t, 1, rec("x/bmc/cmd", ok)), "not a topic of site"},
		{"not a topic", rawBundle(t, 1, rec("node/n1", ok)), "not a topic of site"},
		{"nested bundle", rawBundle(t, 1, rec("bmc/cmd", string(BundleMagic[:])+"xx")), "not a message"},
		{"empty message", rawBundle(t, 1, rec("bmc/cmd", "")), "not a message"},
		{"too many records", rawBundle(t, 1, tooMany), "more than 4096 messages"},
		// A bomb: a few KiB that inflate past the limit.
		{"inflates past the limit", rawBundle(t, 1, rec("bmc/cmd", strings.Repeat("{", MaxBundleBytes+10))), "decompresses to more than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.b) > 64<<10 {
				t.Fatalf("test bundle of %d bytes: the refusal would be the outer size check", len(c.b))
			}
			_, err := DecodeBundle("site1", c.b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	if _, err := DecodeBundle("site1", make([]byte, MaxMessageBytes+2048)); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Fatalf("an oversized bundle: got %v", err)
	}
}

func TestEncodeBundleRefusals(t *testing.T) {
	good := []byte(`{"v":1}`)
	for _, c := range []struct {
		name string
		rs   []BundleRecord
		want string
	}{
		{"none", nil, "holds 1 to"},
		{"other site", []BundleRecord{{Topic: BMCEvtTopic("site2"), Payload: good}}, "not in site"},
		{"site itself", []BundleRecord{{Topic: SitePrefix("site1"), Payload: good}}, "not in site"},
		{"nested", []BundleRecord{{Topic: BMCEvtTopic("site1"), Payload: BundleMagic[:]}}, "not a message"},
		{"too large", []BundleRecord{{Topic: BMCEvtTopic("site1"), Payload: bytes.Repeat([]byte("x"), MaxBundleBytes)}}, "larger than the limit"},
	} {
		if _, err := EncodeBundle("site1", c.rs, flate.BestSpeed); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// FuzzDecodeBundle feeds arbitrary compressed records to DecodeBundle: it
// must never panic, never return more than its limits, and every record
// it returns must be a message-shaped payload on a topic of the site.
func FuzzDecodeBundle(f *testing.F) {
	for _, n := range []int{1, 3} {
		b, err := EncodeBundle("site1", sampleRecords("site1", n), flate.BestSpeed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[2:])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, deflated []byte) {
		for _, b := range [][]byte{append(BundleMagic[:], deflated...), rawBundle(t, 1, deflated)} {
			rs, err := DecodeBundle("site1", b)
			if err != nil {
				continue
			}
			if len(rs) == 0 || len(rs) > MaxBundleRecords {
				t.Fatalf("%d records", len(rs))
			}
			total := 0
			for _, r := range rs {
				total += len(r.Payload)
				site, _, _, err := ParseTopic(r.Topic)
				if err != nil || site != "site1" || len(r.Payload) == 0 || IsBundle(r.Payload) {
					t.Fatalf("record %q %q let through", r.Topic, r.Payload)
				}
			}
			if total > MaxBundleBytes {
				t.Fatalf("%d bytes returned", total)
			}
		}
	})
}
