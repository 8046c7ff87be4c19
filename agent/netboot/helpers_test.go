package netboot

import (
	"fmt"
	"os/exec"
	"strconv"
)

func itoa(i int) string { return strconv.Itoa(i) }

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// runCurl fetches url with curl and returns the body followed by the
// three-digit status.
func runCurl(url string) (string, error) {
	out, err := exec.Command("curl", "-s", "--max-time", "10", "-w", "%{http_code}", url).Output()
	if err != nil {
		return "", fmt.Errorf("curl %s: %w", url, err)
	}
	return string(out), nil
}

// runCurlRaw fetches url with curl (tftp:// too) and fails on any error.
func runCurlRaw(url string) (string, error) {
	out, err := exec.Command("curl", "-sf", "--max-time", "20", url).Output()
	if err != nil {
		return "", fmt.Errorf("curl %s: %w", url, err)
	}
	return string(out), nil
}
