package steps

import (
	"context"
	"fmt"

	"github.com/bmedge/bmedge/ramdisk/configdrive"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// writeConfigDrive writes write_image's configdrive argument (Ironic's:
// a gzipped, base64-encoded image or an http(s) URL of one) onto dev
// after the image, as IPA does, and adds where it went to out. The
// config drive holds secrets: neither it nor its URL's query is logged.
func (r *Runner) writeConfigDrive(ctx context.Context, args map[string]any, dev disk.Device, out map[string]any) error {
	v, _ := args["configdrive"].(string)
	if v == "" {
		return nil
	}
	img, err := configdrive.Image(ctx, v, configdrive.Options{})
	if err != nil {
		return fmt.Errorf("the image was written to %s, but not the config drive: %v", dev.Path, err)
	}
	res, err := configdrive.Write(dev.Path, int(dev.LogicalBlockSize), img)
	clear(img)
	if err != nil {
		return fmt.Errorf("the image was written to %s, but not the config drive: %v", dev.Path, err)
	}
	if dev.Regular {
		// A plain file has no partitions for the kernel to re-read.
	} else if err := disk.RereadPartitions(dev.Path); err != nil {
		r.Log.Warn("the kernel did not re-read the partition table after the config drive", "device", dev.Path, "err", err)
	}
	r.Log.Info("config drive written", "device", dev.Path, "partition", res.Partition, "table", res.Table, "created", res.Created)
	out["configdrive"] = asMap(res)
	out["summary"] = fmt.Sprint(out["summary"], "; ", res.String())
	return nil
}
