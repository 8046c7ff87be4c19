package redfish

import (
	"context"
	"fmt"

	"github.com/stmcginnis/gofish"
)

// NoSecureBootError is the refusal of a BMC whose system has no
// SecureBoot resource: it cannot be asked to boot with UEFI Secure Boot.
type NoSecureBootError struct {
	Endpoint, System string
}

func (e *NoSecureBootError) Error() string {
	return fmt.Sprintf("redfish BMC %s cannot boot %s with UEFI Secure Boot: the system has no SecureBoot resource (the BMC lacks Redfish's SecureBoot, or the server lacks Secure Boot); the node asks for it (capability secure_boot:true in its instance_info or properties); nothing was booted. Remove that capability to boot without Secure Boot, or update the BMC's firmware to one that offers the SecureBoot resource", e.Endpoint, e.System)
}

// SetSecureBoot turns UEFI Secure Boot on or off for the system's next
// boot, as Ironic's redfish management set_secure_boot_state does: the
// SecureBoot resource's SecureBootEnable is PATCHed when it differs, then
// read back. Turning it on also sets the boot mode to UEFI first (Secure
// Boot has no meaning in Legacy mode). A system without the SecureBoot
// resource refuses to turn it on (NoSecureBootError) and has nothing to
// turn off.
func (b *BMC) SetSecureBoot(ctx context.Context, enable bool) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	what := "turn UEFI Secure Boot off"
	if enable {
		what = "turn UEFI Secure Boot on"
	}
	var missing *NoSecureBootError
	var changed, modeSet bool
	var got *bool
	err := b.do(ctx, what, func(c *gofish.APIClient) error {
		missing, changed, modeSet, got = nil, false, false, nil
		uri, err := b.findSystem(c)
		if err != nil {
			return err
		}
		var sys struct {
			SecureBoot link `json:"SecureBoot"`
			Boot       struct {
				Mode string `json:"BootSourceOverrideMode"`
			} `json:"Boot"`
		}
		if err := getJSON(c, uri, &sys); err != nil {
			return err
		}
		if sys.SecureBoot.ID == "" {
			missing = &NoSecureBootError{Endpoint: b.cfg.endpoint, System: uri}
			return nil
		}
		if enable && sys.Boot.Mode != "UEFI" {
			if err := patchJSON(c, uri, map[string]any{"Boot": map[string]any{"BootSourceOverrideMode": "UEFI"}}); err != nil {
				return err
			}
			if err := getJSON(c, uri, &sys); err != nil {
				return err
			}
			if sys.Boot.Mode != "UEFI" {
				return fmt.Errorf("the BMC accepted boot mode UEFI for %s but reports %q; Secure Boot needs UEFI", uri, sys.Boot.Mode)
			}
			modeSet = true
		}
		var sb struct {
			Enable *bool `json:"SecureBootEnable"`
		}
		if err := getJSON(c, sys.SecureBoot.ID, &sb); err != nil {
			return err
		}
		if sb.Enable != nil && *sb.Enable == enable {
			got = sb.Enable
			return nil
		}
		if err := patchJSON(c, sys.SecureBoot.ID, map[string]any{"SecureBootEnable": enable}); err != nil {
			return err
		}
		changed = true
		sb.Enable = nil
		if err := getJSON(c, sys.SecureBoot.ID, &sb); err != nil {
			return err
		}
		got = sb.Enable
		return nil
	})
	if err != nil {
		return err
	}
	if missing != nil {
		if !enable {
			return nil // nothing to turn off
		}
		return missing
	}
	if got == nil || *got != enable {
		// Some BMCs (Dell's) stage the change as a BIOS job applied at
		// the next reboot; this driver does not boot unsigned on hope.
		return fmt.Errorf("redfish BMC %s accepted SecureBootEnable %v but reports %s; the BMC may apply it only after a reboot or refuse it silently: check the server's Secure Boot setting", b.cfg.endpoint, enable, boolOrNone(got))
	}
	b.log.Info("redfish secure boot", "enable", enable, "changed", changed, "boot_mode_set_uefi", modeSet)
	return nil
}

func boolOrNone(v *bool) string {
	if v == nil {
		return "no SecureBootEnable"
	}
	return fmt.Sprintf("SecureBootEnable %v", *v)
}
