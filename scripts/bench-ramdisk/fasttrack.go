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
// node (manageable, powered off), without fast track and with it
// (driver_info/fast_track false or true), reps times each, and counts
// the ramdisk boots of each from the node's history.
func fastTrackBench(ctx context.Context, cl api, id string, reps int, cleanups *[]func()) ([]row, error) {
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
		{"op": "add", "path": "/instance_info/image_checksum", "value": "sha256:" + hex.EncodeToString(sum[:])},
		// The VM's 1 GiB disk is below the ramdisk's default 4 GiB minimum.
		{"op": "add", "path": "/properties/root_device", "value": map[string]any{"serial": "DISK0"}}}
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
	// Each repetition runs both sequences, in turns of order; each is
	// followed by an undeploy and manage (untimed), back to manageable.
	var walls [2][]time.Duration
	boots := [2]int{-1, -1}
	for rep := range reps {
		order := []bool{false, true}
		if rep%2 == 1 {
			order = []bool{true, false}
		}
		for _, on := range order {
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
			wall := time.Since(start)
			b, err := bootsSince(ctx, cl, id, start)
			if err != nil {
				return nil, err
			}
			k := 0
			if on {
				k = 1
			}
			walls[k] = append(walls[k], wall)
			if boots[k] >= 0 && boots[k] != b {
				return nil, fmt.Errorf("fast track %v: %d ramdisk boots in repetition %d, %d before", on, b, rep+1, boots[k])
			}
			boots[k] = b
			fmt.Printf("  repetition %d, %s: %s (%s); ramdisk boots %d; load average %s\n", rep+1, ftLabel(on), secs(wall), strings.Join(each, ", "), b, loadAvg())
			// Undeploy without fast track, so that its cleaning powers
			// the VM off: every sequence starts from a VM that is off.
			if err := cl.must(ctx, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/driver_info/fast_track", "value": "false"}}, nil, 200); err != nil {
				return nil, err
			}
			if err := verb("deleted", "available", 5*time.Minute); err != nil {
				return nil, err
			}
			// Undeploy drops instance_info.
			if err := cl.must(ctx, "PATCH", "/v1/nodes/"+id, patch[:2], nil, 200); err != nil {
				return nil, err
			}
			if err := verb("manage", "manageable", time.Minute); err != nil {
				return nil, err
			}
		}
	}
	off, on := median(walls[0]), median(walls[1])
	fmt.Printf("  medians of %d: without fast track %s (each: %s), with %s (each: %s); fast track saves %s (%.0f %%)\n\n",
		reps, secs(off), durations(walls[0]), secs(on), durations(walls[1]), secs(off-on), 100*(off-on).Seconds()/off.Seconds())
	return []row{
		{fmt.Sprintf("inspect → provide → deploy, %s (%d ramdisk boots, median of %d)", ftLabel(false), boots[0], reps), secs(off) + " (" + durations(walls[0]) + ")", "-", "-"},
		{fmt.Sprintf("inspect → provide → deploy, %s (%d ramdisk boot, median of %d)", ftLabel(true), boots[1], reps), secs(on) + " (" + durations(walls[1]) + ")", "-", "-"},
	}, nil
}

func ftLabel(on bool) string {
	if on {
		return "with fast track"
	}
	return "without fast track"
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
