// Package configdrive takes a config drive as Ironic's provision API takes
// it (PUT /v1/nodes/{node}/states/provision "configdrive") and turns it
// into what the ramdisk writes: a gzipped, base64-encoded ISO 9660 image,
// or an http(s) URL the ramdisk fetches.
//
// Three forms are accepted, as Ironic accepts them:
//
//   - a JSON object with meta_data, network_data, user_data (a string, or
//     an object or list that is written as JSON) and vendor_data (API
//     1.59); the coordinator builds an OpenStack config drive v2 from it
//     (volume label config-2, openstack/{2012-08-10,latest}/meta_data.json,
//     user_data, network_data.json, vendor_data2.json), as Ironic's
//     build_configdrive and openstacksdk do, with the node's uuid and name
//     in meta_data unless given;
//   - a string holding a gzipped, base64-encoded ISO 9660 or VFAT image;
//   - an http:// or https:// URL of such a string (or of a raw image).
//
// A config drive holds secrets (user_data, keys): nothing here logs it.
package configdrive

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
)

const (
	// Label is the volume label cloud-init looks for.
	Label = "config-2"
	// MaxImageBytes bounds the config drive image once decompressed
	// (Ironic's and IPA's limit: 64 MiB).
	MaxImageBytes = 64 << 20
	// MaxEncodedBytes bounds the gzipped, base64-encoded image the
	// coordinator keeps with the node and sends to the ramdisk in the
	// write_image command: that command crosses MQTT, where a message is
	// at most 1 MiB (protocol.MaxMessageBytes). Larger config drives are
	// served from an http(s) URL instead.
	MaxEncodedBytes = 512 << 10
	// MaxURLBytes bounds a config drive URL.
	MaxURLBytes = 2048
)

// Kinds of config drive.
const (
	KindJSON  = "json"
	KindImage = "image"
	KindURL   = "url"
)

// Spec is the JSON form.
type Spec struct {
	MetaData    map[string]any
	NetworkData map[string]any
	UserData    []byte // nil: none
	VendorData  map[string]any
}

// Parsed is a config drive as the API received it.
type Parsed struct {
	Kind string
	// Spec is the JSON form (KindJSON).
	Spec *Spec
	// Value is the encoded image (KindImage) or the URL (KindURL).
	Value string
}

// Error is a config drive the API refuses (HTTP 400).
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func invalid(format string, a ...any) error {
	return &Error{Msg: "Invalid configdrive format: " + fmt.Sprintf(format, a...)}
}

// Parse reads the configdrive field of a provision request. raw is the
// field's JSON; a missing, null or empty value gives nil. jsonForm and
// vendorData say whether the request's API version takes the JSON form
// (1.56) and vendor_data in it (1.59); they are refused with 400 below.
func Parse(raw json.RawMessage, jsonForm, vendorData bool) (*Parsed, error) {
	if Empty(raw) {
		return nil, nil
	}
	s := strings.TrimSpace(string(raw))
	switch s[0] {
	case '{':
		if !jsonForm {
			return nil, &Error{Msg: "Providing a JSON object for configdrive is only supported starting with API version 1.56; send X-OpenStack-Ironic-API-Version: 1.56 or later, or a gzipped and base64-encoded image"}
		}
		spec, err := parseSpec(raw, vendorData)
		if err != nil {
			return nil, err
		}
		return &Parsed{Kind: KindJSON, Spec: spec}, nil
	case '"':
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, invalid("%v", err)
		}
		return parseString(v)
	}
	return nil, invalid("it must be a JSON object (meta_data, network_data, user_data, vendor_data), a gzipped and base64-encoded ISO 9660 or VFAT image, or an http(s) URL of one")
}

// Empty tells a configdrive field that gives none (missing, null, "" or
// {}: Ironic ignores what Python finds false).
func Empty(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null" || s == `""` || s == "{}"
}

func parseSpec(raw json.RawMessage, vendorData bool) (*Spec, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, invalid("%v", err)
	}
	spec := &Spec{}
	obj := func(k string, dst *map[string]any) error {
		v, ok := m[k]
		if !ok {
			return nil
		}
		if t := strings.TrimSpace(string(v)); t == "" || t[0] != '{' {
			return invalid("%s must be a JSON object, not %s", k, clip(t))
		}
		return json.Unmarshal(v, dst)
	}
	for k, v := range m {
		switch k {
		case "meta_data":
			if err := obj(k, &spec.MetaData); err != nil {
				return nil, err
			}
		case "network_data":
			if err := obj(k, &spec.NetworkData); err != nil {
				return nil, err
			}
		case "vendor_data":
			if !vendorData {
				return nil, &Error{Msg: "Providing vendor_data in configdrive is only supported starting with API version 1.59; send X-OpenStack-Ironic-API-Version: 1.59 or later"}
			}
			if err := obj(k, &spec.VendorData); err != nil {
				return nil, err
			}
		case "user_data":
			t := strings.TrimSpace(string(v))
			switch {
			case t == "null":
			case strings.HasPrefix(t, `"`):
				var s string
				if err := json.Unmarshal(v, &s); err != nil {
					return nil, invalid("user_data: %v", err)
				}
				if s != "" {
					spec.UserData = []byte(s)
				}
			case strings.HasPrefix(t, "{"), strings.HasPrefix(t, "["):
				// Written as JSON, as Ironic does (jsonutils.dump_as_bytes).
				var x any
				if err := json.Unmarshal(v, &x); err != nil {
					return nil, invalid("user_data: %v", err)
				}
				spec.UserData, _ = json.Marshal(x)
			default:
				return nil, invalid("user_data must be a string, an object, a list or null, not %s", clip(t))
			}
		default:
			return nil, invalid("unknown key %q; a config drive object has meta_data, network_data, user_data and vendor_data", clip(k))
		}
	}
	return spec, nil
}

// b64 is what Ironic lets through as base64 (with white space).
var b64 = regexp.MustCompile(`^[A-Za-z0-9+/=\s]*$`)

func parseString(v string) (*Parsed, error) {
	if strings.Contains(v, "://") {
		if len(v) > MaxURLBytes {
			return nil, invalid("the URL has %d bytes, more than %d", len(v), MaxURLBytes)
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, invalid("a config drive URL must be http:// or https:// with a host (the ramdisk downloads it through the site's image cache), not %q", redact(v))
		}
		return &Parsed{Kind: KindURL, Value: v}, nil
	}
	if !b64.MatchString(v) {
		return nil, invalid("it is neither a JSON, nor a URL, nor a base64 string")
	}
	if len(v) > MaxEncodedBytes {
		return nil, &Error{Msg: fmt.Sprintf("The configdrive is %d bytes, more than the %d bytes (%d KiB) this coordinator carries to the node in its deploy command (Ironic's limit is %d MiB once decompressed); serve the gzipped, base64-encoded image from an http(s) URL and give that URL as configdrive",
			len(v), MaxEncodedBytes, MaxEncodedBytes>>10, MaxImageBytes>>20)}
	}
	img, err := Decode(v)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if !looksLikeDrive(img) {
		return nil, invalid("the decoded image is neither an ISO 9660 nor a VFAT file system")
	}
	return &Parsed{Kind: KindImage, Value: v}, nil
}

// Decode turns a gzipped, base64-encoded image into its bytes, refusing
// one of more than MaxImageBytes.
func Decode(v string) ([]byte, error) {
	v = strings.Join(strings.Fields(v), "")
	gz, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("not base64: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("the base64 text is not gzip data (%v): gzip the image before encoding it", err)
	}
	img, err := io.ReadAll(io.LimitReader(zr, MaxImageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("the gzip data is damaged: %v", err)
	}
	if len(img) > MaxImageBytes {
		return nil, fmt.Errorf("the image is larger than %d MiB once decompressed (Ironic's limit)", MaxImageBytes>>20)
	}
	return img, nil
}

// looksLikeDrive tells an ISO 9660 volume or a FAT boot sector.
func looksLikeDrive(img []byte) bool {
	if len(img) >= 0x8006 && string(img[0x8001:0x8006]) == "CD001" {
		return true
	}
	return len(img) >= 512 && img[510] == 0x55 && img[511] == 0xAA &&
		(string(img[0x36:0x39]) == "FAT" || string(img[0x52:0x57]) == "FAT32")
}

// Node is what Build takes from the node.
type Node struct {
	UUID, Name string
	// NetworkData is the node's network_data field, used when the
	// config drive has none.
	NetworkData map[string]any
	// Bonds are the node's port groups: when neither the config drive
	// nor the node give network_data, the config drive's network_data
	// has each as a bond of its ports (BondNetworkData).
	Bonds []Bond
}

// Bond is a port group as network_data.json shows it.
type Bond struct {
	// Name is the link's id ("bond0" when the group has no name).
	Name string
	// Mode is the bond mode (Linux bonding's names).
	Mode string
	// Address is the bond's MAC address; "" takes its first port's.
	Address string
	// Properties are the group's: miimon, xmit_hash_policy, lacp_rate
	// and updelay/downdelay become bond_<name>.
	Properties map[string]any
	// Ports are the MAC addresses of its ports.
	Ports []string
}

// BondNetworkData is the network_data.json of a node's port groups, as
// Nova writes a port group (OpenStack's network_data.json schema, read by
// cloud-init and Glean): a "phy" link per port, a "bond" link per group
// with bond_links, bond_mode and the bond_* options of its properties,
// and DHCP (IPv4) on each bond.
func BondNetworkData(bonds []Bond) map[string]any {
	var links, networks []any
	for i, b := range bonds {
		id := b.Name
		if id == "" {
			id = fmt.Sprintf("bond%d", i)
		}
		var members []any
		for j, mac := range b.Ports {
			pid := fmt.Sprintf("%s-port%d", id, j)
			links = append(links, map[string]any{"id": pid, "type": "phy", "ethernet_mac_address": mac, "mtu": 1500})
			members = append(members, pid)
		}
		addr := b.Address
		if addr == "" && len(b.Ports) > 0 {
			addr = b.Ports[0]
		}
		link := map[string]any{"id": id, "type": "bond", "bond_links": members, "bond_mode": b.Mode, "ethernet_mac_address": addr, "mtu": 1500}
		for _, k := range []string{"miimon", "xmit_hash_policy", "lacp_rate", "updelay", "downdelay"} {
			if v, ok := b.Properties[k]; ok {
				link["bond_"+k] = v
			}
		}
		links = append(links, link)
		networks = append(networks, map[string]any{"id": "network-" + id, "type": "ipv4_dhcp", "link": id, "network_id": "network-" + id})
	}
	return map[string]any{"links": links, "networks": networks, "services": []any{}}
}

// Files returns the files of the config drive built from spec for n, as
// Ironic's build_configdrive and openstacksdk's populate_directory write
// them: meta_data.json (uuid and name of the node unless given, and
// hostname = name when the meta_data has none), user_data,
// network_data.json and vendor_data2.json under openstack/2012-08-10 and
// openstack/latest.
func Files(spec *Spec, n Node) (map[string][]byte, error) {
	meta := map[string]any{}
	for k, v := range spec.MetaData {
		meta[k] = v
	}
	if _, ok := meta["uuid"]; !ok {
		meta["uuid"] = n.UUID
	}
	if n.Name != "" {
		if _, ok := meta["name"]; !ok {
			meta["name"] = n.Name
		}
		if _, ok := meta["hostname"]; !ok {
			meta["hostname"] = n.Name
		}
	}
	net := spec.NetworkData
	if len(net) == 0 {
		net = n.NetworkData
	}
	if len(net) == 0 && len(n.Bonds) > 0 {
		net = BondNetworkData(n.Bonds)
	}
	files := map[string][]byte{}
	for _, ver := range []string{"2012-08-10", "latest"} {
		dir := "openstack/" + ver + "/"
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		files[dir+"meta_data.json"] = b
		if len(net) > 0 {
			if files[dir+"network_data.json"], err = json.Marshal(net); err != nil {
				return nil, err
			}
		}
		if len(spec.VendorData) > 0 {
			if files[dir+"vendor_data2.json"], err = json.Marshal(spec.VendorData); err != nil {
				return nil, err
			}
		}
		if len(spec.UserData) > 0 {
			files[dir+"user_data"] = spec.UserData
		}
	}
	return files, nil
}

// ErrTooLarge says a built config drive exceeds MaxEncodedBytes.
var ErrTooLarge = errors.New("config drive too large")

// Build builds the ISO 9660 config drive of spec for n and returns it
// gzipped and base64-encoded, as Ironic hands it to the ramdisk.
func Build(spec *Spec, n Node) (string, error) {
	files, err := Files(spec, n)
	if err != nil {
		return "", err
	}
	img, err := buildISO(Label, files)
	if err != nil {
		return "", err
	}
	if len(img) > MaxImageBytes {
		return "", &Error{Msg: fmt.Sprintf("The config drive built from this configdrive object is %d MiB, more than the %d MiB limit; make user_data smaller", len(img)>>20, MaxImageBytes>>20)}
	}
	s, err := Encode(img)
	if err != nil {
		return "", err
	}
	if len(s) > MaxEncodedBytes {
		return "", &Error{Msg: fmt.Sprintf("The config drive built from this configdrive object is %d bytes gzipped and base64-encoded, more than the %d bytes (%d KiB) this coordinator carries to the node in its deploy command; make user_data smaller, or build the image yourself and give an http(s) URL of it as configdrive",
			len(s), MaxEncodedBytes, MaxEncodedBytes>>10)}
	}
	return s, nil
}

// Encode gzips and base64-encodes an image.
func Encode(img []byte) (string, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(img); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// BuildISO is the ISO 9660 image of files with volume label label (for
// tests and tools; Build is what the API uses).
func BuildISO(label string, files map[string][]byte) ([]byte, error) { return buildISO(label, files) }

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// redact drops a URL's query string and user info (they often carry a
// signature or a password).
func redact(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}
