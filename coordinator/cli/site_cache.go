package cli

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// cacheStatus is the API's answer about a pre-seed.
type cacheStatus struct {
	Site          string  `json:"site"`
	URL           string  `json:"url"`
	CommandID     string  `json:"command_id"`
	State         string  `json:"state"`
	Error         string  `json:"error"`
	Size          int64   `json:"size"`
	AlreadyCached bool    `json:"already_cached"`
	Seconds       float64 `json:"seconds"`
}

// siteCacheCmd is "site cache SITE IMAGE_URL".
func (c *cmd) siteCacheCmd() *cobra.Command {
	var checksum string
	var wait bool
	var timeout time.Duration
	cc := clientCmd(&cobra.Command{
		Use:   "cache SITE IMAGE_URL --checksum ALGO:HEX",
		Short: "Pre-seed a site's image cache with an image, before a maintenance window",
		Long: `Asks the site's edge agent to download an image into its image cache now, so that
the deploys of a maintenance window start from the site's disk instead of the WAN.
The agent must run with --image-cache-dir and --image-cache-listen (docs/imagecache.md).

IMAGE_URL and --checksum are what the nodes will deploy: their instance_info
image_source and image_checksum (sha256:HEX or sha512:HEX). The cache keeps
an image only once its checksum matched, and keys it by URL and checksum, so a deploy
finds it only when both are the same.

The image downloads at the site in the background; the agent logs when it is done and
the coordinator logs the result. With --wait this command waits for it and says how it
ended (exit 1 when it failed); without, it prints the request's command id. Running the
command again for an image already cached answers at once.`,
		Example: "  coordinator site cache site1 http://images.example/ubuntu-24.04.raw --checksum sha256:9f86d08188... --wait\n" +
			"  coordinator node set n1 --instance-info image_source=http://images.example/ubuntu-24.04.raw --instance-info image_checksum=sha256:9f86d08188...",
		Args: args("SITE", "IMAGE_URL"),
		RunE: func(_ *cobra.Command, a []string) error {
			if checksum == "" {
				return usagef("site cache needs --checksum ALGO:HEX (the image's image_checksum): the site cache keeps only images it can verify")
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			path := "/v1/sites/" + url.PathEscape(a[0]) + "/cache"
			var st cacheStatus
			if _, _, err := cl.do("POST", path, map[string]string{"url": a[1], "checksum": checksum}, &st); err != nil {
				return err
			}
			if !wait {
				fmt.Fprintf(c.out, "site %s: pre-seed of %s requested (command %s); the edge agent downloads it now and logs when it is done\n", a[0], a[1], st.CommandID)
				return nil
			}
			ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			wc := *cl
			wc.ctx = ctx
			start := time.Now()
			for st.State == "pending" {
				if time.Since(start) > timeout {
					fmt.Fprintf(c.err, "site %s: pre-seed of %s still running after %s (command %s); it goes on at the site\n", a[0], a[1], timeout, st.CommandID)
					return exitCode(2)
				}
				select {
				case <-ctx.Done():
					fmt.Fprintf(c.err, "stopped waiting; the pre-seed goes on at the site (command %s)\n", st.CommandID)
					return exitCode(130)
				case <-time.After(2 * time.Second):
				}
				if _, _, err := wc.do("POST", path, map[string]string{"command_id": st.CommandID}, &st); err != nil {
					if ctx.Err() != nil {
						continue
					}
					return err
				}
			}
			if st.State != "cached" {
				fmt.Fprintf(c.err, "site %s: pre-seed of %s failed: %s\n", a[0], a[1], st.Error)
				return exitCode(1)
			}
			how := fmt.Sprintf("downloaded and verified in %.1fs", st.Seconds)
			if st.AlreadyCached {
				how = "was already cached"
			}
			fmt.Fprintf(c.out, "site %s: %s (%d bytes) %s\n", a[0], a[1], st.Size, how)
			return nil
		},
	}, false)
	cc.Flags().StringVar(&checksum, "checksum", "", "the image's checksum, `ALGO:HEX` (sha256, sha384 or sha512), as in its instance_info image_checksum (required)")
	cc.Flags().BoolVar(&wait, "wait", false, "wait until the site has the image, and say how it ended")
	cc.Flags().DurationVar(&timeout, "timeout", 2*time.Hour, "with --wait: how long to wait (the download goes on after)")
	return cc
}
