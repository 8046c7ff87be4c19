package drivers

import (
	"context"

	"github.com/bmedge/bmedge/protocol"
)

// HealthReader is a BMC that tells the hardware's health, its sensors and
// its event log (Redfish, IPMI). The edge agent reads it with power sync.
type HealthReader interface {
	// ReadHealth reads the system's health and sensors, and the newest
	// entries of the BMC's event log, at most protocol.MaxReportEvents,
	// oldest first. A part that cannot be read is said in the reading's
	// Error, the rest holds; an error means nothing could be read.
	ReadHealth(ctx context.Context) (*protocol.HealthReport, error)
}
