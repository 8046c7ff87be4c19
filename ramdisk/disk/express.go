package disk

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// MethodMetadataFallback names the express erase's fallback: only the
// partition tables and signatures are erased (EraseMetadata).
const MethodMetadataFallback Method = "metadata-only (fallback)"

// ExpressResult says what EraseExpress did to one device.
type ExpressResult struct {
	Device          string   `json:"device"`
	Method          Method   `json:"method,omitempty"`
	Seconds         float64  `json:"seconds"`
	VerifiedSamples int      `json:"verified_samples,omitempty"`
	Skipped         bool     `json:"skipped,omitempty"`
	SkipReason      string   `json:"skip_reason,omitempty"`
	Notes           []string `json:"notes,omitempty"`
}

// ExpressOptions tunes EraseExpress.
type ExpressOptions struct {
	EraseOptions
	// Fallback erases the metadata of a device that has no hardware erase
	// or whose hardware erase failed (IPA's express erase always does;
	// here the operator asks for it with
	// agent_continue_if_secure_erase_failed).
	Fallback bool
	// FallbackArg names the argument that sets Fallback, for messages.
	FallbackArg string
}

// EraseExpress erases devs by hardware only (NVMe Format, ATA Security
// Erase; the first HardwareEraser whose Detect proves support) and
// verifies that each reads back as zeros. Protected devices (virtual
// media, read-only, removable, the boot parameters medium) are skipped,
// as IPA's express erase skips them, and said so in the results. Every
// device is examined before any is erased: when one has no hardware erase
// and Fallback is off, nothing is erased and the error names each such
// device and the argument that allows the fallback.
func EraseExpress(ctx context.Context, devs []Device, opts ExpressOptions) ([]ExpressResult, error) {
	hw := opts.Hardware
	if hw == nil {
		hw = DefaultHardwareErasers()
	}
	type plan struct {
		eraser HardwareEraser
		method Method
	}
	results := make([]ExpressResult, len(devs))
	plans := make([]plan, len(devs))
	var lacking []string
	for i, d := range devs {
		results[i].Device = d.Path
		if reason := skipReason(d); reason != "" {
			results[i].Skipped, results[i].SkipReason = true, reason
			continue
		}
		if d.Regular {
			results[i].Notes = append(results[i].Notes, "a regular file has no hardware erase")
		} else {
			for _, h := range hw {
				m, ok, why := h.Detect(ctx, d)
				if ok {
					plans[i] = plan{h, m}
					break
				}
				if why != "" {
					results[i].Notes = append(results[i].Notes, why)
				}
			}
		}
		if plans[i].eraser == nil {
			why := "no NVMe Format or ATA Security Erase"
			if len(results[i].Notes) > 0 {
				why = strings.Join(results[i].Notes, "; ")
			}
			lacking = append(lacking, fmt.Sprintf("%s (%s)", d.Path, why))
		}
	}
	if len(lacking) > 0 && !opts.Fallback {
		return results, fmt.Errorf("express erase needs a hardware erase on every device and these have none: %s; nothing was erased. Set %s=true to erase only the metadata of such devices (IPA's express fallback), or run deploy.erase_devices, which overwrites them",
			strings.Join(lacking, ", "), opts.FallbackArg)
	}
	for i, d := range devs {
		r := &results[i]
		if r.Skipped {
			continue
		}
		if err := ctx.Err(); err != nil {
			return results, fmt.Errorf("express erase cancelled before %s: %w", d.Path, err)
		}
		start := time.Now()
		if err := CheckNotInUse(d, opts.ProcRoot); err != nil {
			return results, err
		}
		if p := plans[i]; p.eraser != nil {
			err := p.eraser.Run(ctx, d, p.method)
			if err == nil {
				r.Method = p.method
				n, verr := Verify(ctx, d, opts.EraseOptions)
				r.VerifiedSamples = n
				r.Seconds = time.Since(start).Seconds()
				if verr != nil {
					return results, fmt.Errorf("%w (erased by %s)", verr, p.method)
				}
				continue
			}
			if !opts.Fallback || ctx.Err() != nil {
				return results, fmt.Errorf("express erase of %s by %s failed: %w; set %s=true to fall back to erasing its metadata", d.Path, p.method, err, opts.FallbackArg)
			}
			r.Notes = append(r.Notes, fmt.Sprintf("%s failed (%v)", p.method, err))
		}
		if _, err := EraseMetadata(ctx, d, opts.EraseOptions); err != nil {
			return results, fmt.Errorf("express erase of %s: metadata fallback: %w", d.Path, err)
		}
		r.Method = MethodMetadataFallback
		r.Seconds = time.Since(start).Seconds()
	}
	return results, nil
}
