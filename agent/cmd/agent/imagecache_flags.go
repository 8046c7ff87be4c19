package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/agent/fetchrule"
)

// imageCacheFlags declares the flags of agent.ImageCacheOptions; the returned function
// reads them after parsing.
func imageCacheFlags(fs *flag.FlagSet) func() (agent.ImageCacheOptions, error) {
	dir := fs.String("image-cache-dir", "", "folder of the site's image cache: write_image fetches through it, each image crosses the WAN once (off when empty)")
	listen := fs.String("image-cache-listen", "", "address (host:port on the site network) where the nodes fetch their images from the cache (required with --image-cache-dir)")
	url := fs.String("image-cache-url", "", "the image cache as the nodes reach it, when not http://IMAGE-CACHE-LISTEN (e.g. behind NAT)")
	size := byteSize(agent.DefaultImageCacheBytes)
	fs.Var(&size, "image-cache-size", "most bytes the image cache holds (cached images plus downloads running), e.g. 200GiB or 500G; the least recently used images go first")
	var allow, bmcNets []string
	fs.Func("fetch-allow", "`CIDR` the agent may fetch images, firmware and config drives from although the fetch rule refuses it (loopback, link-local, the BMCs' addresses and --bmc-network); repeat or separate with commas, e.g. 127.0.0.0/8 for an image server on this host (docs/security.md)",
		func(v string) error { allow = append(allow, v); return nil })
	fs.Func("bmc-network", "`CIDR` of the site's BMC network, which the agent never fetches an image or config drive from unless --fetch-allow allows it; repeatable (the BMC addresses the agent knows are refused anyway)",
		func(v string) error { bmcNets = append(bmcNets, v); return nil })
	return func() (agent.ImageCacheOptions, error) {
		a, err := fetchrule.ParseAllow(allow)
		if err != nil {
			return agent.ImageCacheOptions{}, fmt.Errorf("--fetch-allow: %v", err)
		}
		b, err := fetchrule.ParseAllow(bmcNets)
		if err != nil {
			return agent.ImageCacheOptions{}, fmt.Errorf("--bmc-network: %v", err)
		}
		return agent.ImageCacheOptions{Dir: *dir, Listen: *listen, URL: *url, MaxBytes: int64(size), FetchAllow: a, BMCNets: b}, nil
	}
}

// byteSize is a flag of bytes with an optional unit (K, M, G, T, with or
// without "iB"/"B"; powers of 1024).
type byteSize int64

func (b *byteSize) String() string {
	v := int64(*b)
	for _, u := range []string{"TiB", "GiB", "MiB", "KiB"} {
		shift := map[string]uint{"TiB": 40, "GiB": 30, "MiB": 20, "KiB": 10}[u]
		if v >= 1<<shift && v%(1<<shift) == 0 {
			return strconv.FormatInt(v>>shift, 10) + u
		}
	}
	return strconv.FormatInt(v, 10)
}

func (b *byteSize) Set(s string) error {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	shift := uint(0)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || v <= 0 || v > (1<<62)>>shift {
		return fmt.Errorf("%q is not a size; give bytes with an optional unit, e.g. 200GiB", s)
	}
	*b = byteSize(v << shift)
	return nil
}
