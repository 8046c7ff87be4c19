package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/store"
)

const backupLong = `Takes a backup of a running coordinator's database through its API (POST /v1/backup) and
writes it to FILE (mode 0600). The coordinator keeps running and serving while it is
taken; the backup holds every node, port, site, history entry and inventory as of one
moment (one read timestamp of its Badger store: changes after that moment are not in
it), and the coordinator's secret (from which broker and ramdisk credentials derive).

The file is encrypted (AES-256-GCM, in parts, with a key derived from the data folder's
db.key): it holds BMC and rescue passwords, and is never written in the clear. Restoring
it needs that db.key: keep a copy of the key apart from the backups, as you keep
passwords; without it the backup cannot be read by anyone, you included.

One backup runs at a time: another one meanwhile is refused (HTTP 409). With --auth
http_basic it needs an htpasswd user's credentials, as every request does. A backup may
take an hour at most, and is given up when nothing arrives for 5 minutes. The file is
written beside FILE under a temporary name and renamed to FILE once the coordinator has
sent it whole; an interrupted backup leaves no FILE. FILE must not exist.`

const backupExample = `  coordinator backup --out /var/backups/bmedge/coordinator-$(date +%Y%m%dT%H%M).backup
  # restore it later, offline, with the db.key of the data folder that was backed up:
  coordinator restore --from coordinator-20260101T0300.backup --data-dir /var/lib/bmedge/coordinator.new \
      --key-file /root/bmedge-db.key`

// backupStall is how long the backup may go without a byte from the
// coordinator before it is given up.
const backupStall = 5 * time.Minute

func (c *cmd) backupCmd() *cobra.Command {
	var out string
	cc := clientCmd(&cobra.Command{
		Use:     "backup --out FILE",
		Short:   "Take an encrypted backup of a running coordinator's database",
		Long:    backupLong,
		Example: backupExample,
		Args:    args(),
		RunE: func(_ *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("backup needs --out FILE, the file to write the backup to")
			}
			if out == "-" {
				return usagef("backup --out - is not taken: the backup is checked whole before it is renamed into place, so it needs a file")
			}
			return c.backup(out)
		},
	}, false)
	cc.Flags().StringVar(&out, "out", "", "`FILE` to write the backup to (required; must not exist; written mode 0600)")
	_ = cc.MarkFlagFilename("out")
	return cc
}

func (c *cmd) backup(out string) error {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("%s exists: give a new file name (a backup never replaces a file)", out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cl, err := c.apiClient()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".partial-")
	if err != nil {
		return fmt.Errorf("cannot write beside %s: %w", out, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", cl.base+"/v1/backup", strings.NewReader("{}"))
	if err != nil {
		return fmt.Errorf("bad coordinator URL %q: %w", cl.base, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if cl.user != "" {
		req.SetBasicAuth(cl.user, cl.password)
	}
	// No time limit for the whole download (a big database takes a
	// while), but one for a stall.
	hc := *cl.http
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return cl.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		msg := errorText(b, resp.Status)
		switch {
		case resp.StatusCode == http.StatusUnauthorized && cl.user == "":
			msg = fmt.Sprintf("the coordinator at %s asks for a user name and password (HTTP 401: %s): set OS_USERNAME and OS_PASSWORD, or --os-username and --os-password, to an entry of its --htpasswd file", cl.base, msg)
		case resp.StatusCode == http.StatusUnauthorized:
			msg = fmt.Sprintf("the coordinator at %s refused user %q (HTTP 401: %s): check OS_USERNAME and OS_PASSWORD (or --os-username and --os-password) against its --htpasswd file", cl.base, cl.user, msg)
		case resp.StatusCode == http.StatusNotFound:
			msg = fmt.Sprintf("the coordinator at %s does not serve backups (HTTP 404: %s): it is an older version", cl.base, msg)
		default:
			msg = fmt.Sprintf("the coordinator refused the backup (HTTP %d): %s", resp.StatusCode, msg)
		}
		return &apiError{Status: resp.StatusCode, Msg: msg}
	}
	body := &stallReader{r: resp.Body, t: time.AfterFunc(backupStall, cancel)}
	defer body.t.Stop()
	n, err := store.CheckBackupFrame(io.TeeReader(body, tmp))
	if err != nil {
		why := err.Error()
		if t := resp.Trailer.Get(api.BackupErrorTrailer); t != "" {
			why = "the coordinator stopped it: " + t
		} else if ctx.Err() != nil && c.ctx.Err() == nil {
			why = fmt.Sprintf("the coordinator sent nothing for %s", backupStall)
		}
		return fmt.Errorf("the backup is incomplete after %d bytes (%s); nothing was written to %s", n, why, out)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	// A link never replaces a file that appeared meanwhile.
	if err := os.Link(tmp.Name(), out); err != nil {
		return fmt.Errorf("cannot put the backup at %s: %w", out, err)
	}
	os.Remove(tmp.Name())
	done = true
	if d, err := os.Open(filepath.Dir(out)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	nodes, keys := resp.Trailer.Get(api.BackupNodesTrailer), resp.Trailer.Get(api.BackupKeysTrailer)
	fmt.Fprintf(c.out, "backup of %s nodes (%s keys, %s) written to %s; it opens only with the coordinator's db.key: keep a copy of that apart\n",
		textOr(nodes, "?"), textOr(keys, "?"), sizeText(n), out)
	return nil
}

// stallReader pushes its timer back at every read.
type stallReader struct {
	r io.Reader
	t *time.Timer
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.t.Reset(backupStall)
	}
	return n, err
}

func textOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

const restoreLong = `Makes a new data folder for the coordinator from a backup ('coordinator backup'), offline:
no coordinator is needed, and none may use the folder. --data-dir must not exist or be
empty (a folder that holds anything, such as a coordinator's database, is refused); its
parent must exist.

The whole backup is read and checked first, with nothing written: a truncated file, a
changed or damaged byte, or a key file that is not the one it was made with is refused
with an error that says which. Then the folder is made beside --data-dir under a
temporary name and renamed into place once it is whole, so that a failure leaves
nothing behind.

--key-file is the db.key of the data folder that was backed up: the backup is encrypted
with a key derived from it. The restored folder keeps a copy of it as its db.key (its
database is encrypted with the same key), so the same key file keeps opening backups
taken afterwards. The folder also gets the coordinator's secret from the backup, so
that sites' credentials and running ramdisks keep working.

Then start the coordinator on it ('coordinator serve --data-dir DIR', as the user it
runs as: under systemd, 'chown -R bmedge:bmedge DIR' first). It knows the nodes as they
were when the backup was taken.`

const restoreExample = `  systemctl stop bmedge-coordinator
  coordinator restore --from /var/backups/bmedge/coordinator-20260101T0300.backup \
      --data-dir /var/lib/bmedge/coordinator.restored --key-file /root/bmedge-db.key
  mv /var/lib/bmedge/coordinator /var/lib/bmedge/coordinator.before-restore
  mv /var/lib/bmedge/coordinator.restored /var/lib/bmedge/coordinator
  chown -R bmedge:bmedge /var/lib/bmedge/coordinator
  systemctl start bmedge-coordinator`

func (c *cmd) restoreCmd() *cobra.Command {
	var from, dataDir, keyFile string
	cc := &cobra.Command{
		Use:     "restore --from FILE --data-dir DIR --key-file FILE",
		Short:   "Make a new data folder from a backup (offline)",
		Long:    restoreLong,
		Example: restoreExample,
		Args:    args(),
		RunE: func(_ *cobra.Command, _ []string) error {
			var missing []string
			for _, f := range []struct{ v, flag string }{{from, "--from FILE (the backup)"}, {dataDir, "--data-dir DIR (the new data folder)"},
				{keyFile, "--key-file FILE (the db.key of the data folder that was backed up)"}} {
				if f.v == "" {
					missing = append(missing, f.flag)
				}
			}
			if len(missing) > 0 {
				return usagef("restore needs %s", strings.Join(missing, ", "))
			}
			log := slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
			info, err := engine.Restore(from, dataDir, keyFile, log)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			fmt.Fprintf(&b, "restored %d nodes (%d keys) of the backup taken at %s into %s; start the coordinator with --data-dir %s\n",
				info.Nodes, info.Keys, info.Created.Format(time.RFC3339), dataDir, dataDir)
			_, err = c.out.Write(b.Bytes())
			return err
		},
	}
	fs := cc.Flags()
	fs.SortFlags = false
	fs.StringVar(&from, "from", "", "backup `FILE` written by 'coordinator backup' (required)")
	fs.StringVar(&dataDir, "data-dir", "", "new data folder `DIR` to make (required; must not exist or be empty)")
	fs.StringVar(&keyFile, "key-file", "", "`FILE`: the db.key of the data folder that was backed up (required; mode 0600)")
	_ = cc.MarkFlagFilename("from")
	_ = cc.MarkFlagDirname("data-dir")
	_ = cc.MarkFlagFilename("key-file")
	return cc
}
