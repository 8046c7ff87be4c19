package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"
)

// fastTrackBench times inspect → provide → deploy on the boot bench's
// node (manageable, powered off), without fast track and then with it
// (driver_info/fast_track false, then true), and counts the ramdisk
// boots of each from the node's history. Between the two the node is
// undeployed and managed again (not timed).
func fastTrackBench(ctx context.Context, cl api, id string, cleanups *[]func()) ([]row, error) {
	fmt.Printf("== fast track: inspect → provide → deploy, wall time from the inspect verb until deploy rests in active\n")
	img := make([]byte, 16<<20)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range img {
		img[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(img)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/raw.img" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(img)
	})}
	go func() { _ = srv.Serve(ln) }()
	*cleanups = append(*cleanups, func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	patch := []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": "http://10.0.2.2:" + port + "/raw.img"},
		{"op": "add", "path": "/instance_info/image_checksum", "value": "sha256:" + hex.EncodeToString(sum[:])}}
	if err := cl.must(ctx, "PATCH", "/v1/nodes/"+id, patch, nil, 200); err != nil {
		return nil, err
	}
	verb := func(target, want string, timeout time.Duration) error {
		if err := cl.must(ctx, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": target}, nil, 202); err != nil {
			return err
		}
		n, err := cl.waitRest(ctx, id, timeout)
		if err != nil {
			return fmt.Errorf("%s: %w", target, err)
		}
		if n.State != want {
			return fmt.Errorf("%s ended in %q, want %q: %s", target, n.State, want, n.LastError)
		}
		return nil
	}
	var rows []row
	var walls [2]time.Duration
	for i, on := range []bool{false, true} {
		if err := cl.must(ctx, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/driver_info/fast_track", "value": fmt.Sprint(on)}}, nil, 200); err != nil {
			return nil, err
		}
		start := time.Now()
		var each []string
		for _, v := range []struct{ target, want string }{{"inspect", "manageable"}, {"provide", "available"}, {"active", "active"}} {
			t0 := time.Now()
			if err := verb(v.target, v.want, 5*time.Minute); err != nil {
				return nil, fmt.Errorf("fast track %v: %w", on, err)
			}
			each = append(each, fmt.Sprintf("%s %s", v.target, secs(time.Since(t0))))
		}
		walls[i] = time.Since(start)
		boots, err := bootsSince(ctx, cl, id, start)
		if err != nil {
			return nil, err
		}
		label := "without fast track"
		if on {
			label = "with fast track"
		}
		fmt.Printf("  %s: %s (%s); ramdisk boots %d\n", label, secs(walls[i]), strings.Join(each, ", "), boots)
		rows = append(rows, row{fmt.Sprintf("inspect → provide → deploy, %s (%d ramdisk boots)", label, boots), secs(walls[i]), "-", "-"})
		if !on {
			// Back to manageable and off, untimed.
			if err := verb("deleted", "available", 5*time.Minute); err != nil {
				return nil, err
			}
			if err := verb("manage", "manageable", time.Minute); err != nil {
				return nil, err
			}
		}
	}
	fmt.Printf("  fast track saves %s of %s (%.0f %%)\n\n", secs(walls[0]-walls[1]), secs(walls[0]), 100*(walls[0]-walls[1]).Seconds()/walls[0].Seconds())
	return rows, nil
}

// bootsSince counts the ramdisk boots the node's history shows after since.
func bootsSince(ctx context.Context, cl api, id string, since time.Time) (int, error) {
	var h struct {
		History []struct {
			Time  time.Time `json:"created_at"`
			Event string    `json:"event"`
		} `json:"history"`
	}
	if err := cl.must(ctx, "GET", "/v1/nodes/"+id+"/history", nil, &h, 200); err != nil {
		return 0, err
	}
	k := 0
	for _, e := range h.History {
		if strings.HasPrefix(e.Event, "ramdisk booted") && e.Time.After(since) {
			k++
		}
	}
	return k, nil
}
