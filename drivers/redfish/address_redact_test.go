package redfish_test

import (
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers/redfish"
)

// TestAddressErrorsHideCredentials checks that a refused redfish_address
// is never quoted whole: its error becomes a command's result and the
// node's last_error, so a password or query in the address must not
// appear in it, whether url.Parse takes the address or refuses it.
func TestAddressErrorsHideCredentials(t *testing.T) {
	for _, addr := range []string{
		"ftp://admin:S3cretPW@10.0.0.5",          // parses; wrong scheme
		"https://admin:S3cretPW%zz@10.0.0.5",     // url.Parse refuses the escape
		"https://admin:S3cretPW/x@10.0.0.5",      // a / in the password ends the authority early
		"https://10.0.0.5/x?token=S3cretPW",      // a query
		"https://admin:S3cretPW@:443",            // no host
		"gopher://10.0.0.5/?password=S3cretPW#f", // wrong scheme and a query
	} {
		_, err := redfish.New(map[string]any{"redfish_address": addr, "redfish_username": "u", "redfish_password": "p"}, redfish.Options{})
		if err == nil {
			t.Errorf("%s: accepted", addr)
			continue
		}
		if strings.Contains(err.Error(), "S3cretPW") {
			t.Errorf("the error for a refused address carries its secret: %v", err)
		}
		if !strings.Contains(err.Error(), "redfish_address") {
			t.Errorf("the error does not name the key: %v", err)
		}
	}
}
