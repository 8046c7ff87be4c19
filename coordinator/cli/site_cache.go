package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// siteCacheCmd is "site cache SITE IMAGE_URL". Not built yet.
func (c *cmd) siteCacheCmd() *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:    "cache SITE IMAGE_URL",
		Short:  "Not built yet",
		Hidden: true,
		Args:   args("SITE", "IMAGE_URL"),
		RunE:   func(*cobra.Command, []string) error { return errors.New("site cache is not built yet") },
	}, false)
}
