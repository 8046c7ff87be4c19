// Command ipmisim runs Debian's ipmi_sim as an IPMI BMC for a lab (see
// 'go run ./scripts/ipmisim --help'): it writes the simulator's
// configuration into a temporary folder (drivers/ipmi/ipmisim), starts it
// on a free UDP port of 127.0.0.1, writes the node's driver_info as JSON
// and runs until interrupted. With --power-on, a shell command runs each
// time the chassis powers on (a QEMU VM, say) and is killed at power-off;
// it sees the boot device in force as $BM_IPMISIM_BOOT (pxe, default,
// cdrom, bios, none).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ipmisim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `ipmisim: an IPMI BMC for a lab, Debian's ipmi_sim (package openipmi) on 127.0.0.1.

Usage: go run ./scripts/ipmisim --info-file FILE [--username U --password P] [--power-on 'COMMAND']

It prints the BMC's address and writes FILE, the driver_info of an ipmi node
({"ipmi_address", "ipmi_port", "ipmi_username", "ipmi_password"}, mode 0600), for
  coordinator node create --driver ipmi --driver-info ... (or the API's driver_info).
Check it independently with
  ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U admin -P PASSWORD chassis status

Flags:
`)
		fs.PrintDefaults()
	}
	infoFile := fs.String("info-file", "", "where to write the node's driver_info as JSON (required)")
	user := fs.String("username", "admin", "the BMC's administrator")
	pass := fs.String("password", "", "the administrator's password (default: $IPMISIM_PASSWORD, else required)")
	powerOn := fs.String("power-on", "", "shell command run at each power-on and killed at power-off ($BM_IPMISIM_BOOT is the boot device)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *pass == "" {
		*pass = os.Getenv("IPMISIM_PASSWORD")
	}
	if *infoFile == "" || *pass == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "error: --info-file and a password (--password or IPMISIM_PASSWORD) are required; see --help")
		return 2
	}
	sim, err := ipmisim.Start(ipmisim.Options{Users: []ipmisim.User{{Name: *user, Password: *pass, Priv: "admin"}}, PowerOn: *powerOn})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer sim.Close()
	info := sim.DriverInfo()
	info["ipmi_username"], info["ipmi_password"] = *user, *pass
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := os.WriteFile(*infoFile, append(b, '\n'), 0o600); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprintf(stdout, "ipmisim: BMC at %s (UDP), user %s; driver_info in %s; state in %s\n", sim.Addr(), *user, *infoFile, sim.Dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Fprintln(stdout, "ipmisim: stopping")
	return 0
}
