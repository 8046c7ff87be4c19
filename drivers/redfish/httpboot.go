package redfish

import (
	"context"
	"fmt"
	"slices"

	"github.com/stmcginnis/gofish"
)

// BootUefiHTTP is Redfish's boot source override target for UEFI HTTP
// boot: the firmware fetches the image at the Boot object's HttpBootUri.
const BootUefiHTTP = "UefiHttp"

// httpBootDoc is the part of a ComputerSystem that UEFI HTTP boot needs,
// read raw: whether HttpBootUri is there at all matters.
type httpBootDoc struct {
	Boot map[string]any `json:"Boot"`
}

// checkHTTPBoot says why the BMC's system cannot boot by UEFI HTTP boot
// (nil when it can): Ironic's redfish-https needs the override target
// UefiHttp among the allowed ones and an HttpBootUri property.
func (b *BMC) checkHTTPBoot(doc httpBootDoc, uri string) error {
	const use = "; use boot_interface redfish-virtual-media (Metal3: a redfish-virtualmedia:// BMC address) for this node"
	if doc.Boot == nil {
		return fmt.Errorf("the Redfish system %s of BMC %s has no Boot object: it cannot boot by UEFI HTTP boot (redfish-https)%s", uri, b.cfg.endpoint, use)
	}
	if raw, ok := doc.Boot["BootSourceOverrideTarget@Redfish.AllowableValues"].([]any); ok {
		var vals []string
		for _, v := range raw {
			if s, ok := v.(string); ok {
				vals = append(vals, s)
			}
		}
		if !slices.Contains(vals, BootUefiHTTP) {
			return fmt.Errorf("the Redfish system %s of BMC %s does not offer the boot source override target UefiHttp (it offers %v): it cannot boot by UEFI HTTP boot (redfish-https)%s", uri, b.cfg.endpoint, vals, use)
		}
	}
	if _, ok := doc.Boot["HttpBootUri"]; !ok {
		return fmt.Errorf("the Redfish system %s of BMC %s has no Boot/HttpBootUri property: it cannot boot by UEFI HTTP boot (redfish-https)%s", uri, b.cfg.endpoint, use)
	}
	return nil
}

// BootFromHTTP prepares the next boot by UEFI HTTP boot from url, as
// Ironic's redfish-https boot interface does: the boot source override
// UefiHttp, once, in UEFI mode, with HttpBootUri the image's URL; read
// back, since some BMCs accept a PATCH and ignore part of it. A BMC that
// does not offer UefiHttp or has no HttpBootUri fails before anything
// is written.
func (b *BMC) BootFromHTTP(ctx context.Context, url string) error {
	return b.patchHTTPBoot(ctx, "set the UEFI HTTP boot", map[string]any{
		"BootSourceOverrideTarget":  BootUefiHTTP,
		"BootSourceOverrideEnabled": "Once",
		"BootSourceOverrideMode":    "UEFI",
		"HttpBootUri":               url,
	}, func(got map[string]any) bool {
		return got["BootSourceOverrideTarget"] == BootUefiHTTP && got["HttpBootUri"] == url
	})
}

// ClearHTTPBoot clears the HttpBootUri BootFromHTTP set (Ironic's
// redfish-https clean up): a system that has no HttpBootUri has nothing
// to clear.
func (b *BMC) ClearHTTPBoot(ctx context.Context) error {
	return b.patchHTTPBoot(ctx, "clear the UEFI HTTP boot URI", map[string]any{"HttpBootUri": nil},
		func(got map[string]any) bool { u, _ := got["HttpBootUri"].(string); return u == "" })
}

func (b *BMC) patchHTTPBoot(ctx context.Context, what string, body map[string]any, ok func(map[string]any) bool) error {
	clear := body["HttpBootUri"] == nil
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	return b.do(ctx, what, func(c *gofish.APIClient) error {
		uri, err := b.findSystem(c)
		if err != nil {
			return err
		}
		var doc httpBootDoc
		if err := getJSON(c, uri, &doc); err != nil {
			return err
		}
		if clear {
			if _, has := doc.Boot["HttpBootUri"]; !has {
				return nil
			}
		} else if err := b.checkHTTPBoot(doc, uri); err != nil {
			return err
		}
		if err := patchJSON(c, uri, map[string]any{"Boot": body}); err != nil {
			return err
		}
		var back httpBootDoc
		if err := getJSON(c, uri, &back); err != nil {
			return err
		}
		if !ok(back.Boot) {
			return fmt.Errorf("the BMC accepted the PATCH of %s but reports Boot %v", uri, back.Boot)
		}
		b.log.Info("redfish "+what, "target", back.Boot["BootSourceOverrideTarget"])
		return nil
	})
}
