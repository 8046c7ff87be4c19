package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Trailers of a backup's answer: sent after its last byte, since only
// then is it known how it ended.
const (
	// BackupErrorTrailer says why a backup ended before its end (the
	// answer was already 200 when it failed).
	BackupErrorTrailer = "Bmedge-Backup-Error"
	// BackupKeysTrailer and BackupNodesTrailer count what a whole backup
	// holds.
	BackupKeysTrailer  = "Bmedge-Backup-Keys"
	BackupNodesTrailer = "Bmedge-Backup-Nodes"
)

// backupStall is how long one write of a backup to its client may take
// (a part of at most 64 KiB), and backupMax how long a whole backup may:
// a client that stops reading, or reads a trickle, is cut off and the
// one backup slot is free again, so that it cannot keep the database's
// snapshot (which holds back Badger's compaction of older versions) and
// the slot for long (docs/security.md). Variables for the tests, which
// change them while a backup's handler may still be running.
var (
	backupStall = newLimit(30 * time.Second)
	backupMax   = newLimit(time.Hour)
)

// limit is a duration read and set atomically.
type limit struct{ ns atomic.Int64 }

func newLimit(d time.Duration) *limit {
	l := &limit{}
	l.set(d)
	return l
}

func (l *limit) get() time.Duration  { return time.Duration(l.ns.Load()) }
func (l *limit) set(d time.Duration) { l.ns.Store(int64(d)) }

// backupHandler serves POST /v1/backup: the coordinator's database as an
// encrypted backup (engine.Backup), one at a time. It is an operator's
// request like any other (with --auth http_basic every user of the
// htpasswd file is an administrator: there are no roles), and the engine
// goes on while it streams.
type backupHandler struct {
	s       *Server
	running atomic.Bool
}

func (b *backupHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The request takes no fields: an empty body or {}.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "cannot read request body: "+err.Error())
		return
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && !bytes.Equal(bytes.Join(bytes.Fields(t), nil), []byte("{}")) {
		writeError(w, http.StatusBadRequest, "POST /v1/backup takes no fields: send an empty body or {}")
		return
	}
	if !b.running.CompareAndSwap(false, true) {
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusConflict, "A backup of this coordinator is already running, and one runs at a time: wait for it to end, then try again.")
		return
	}
	defer b.running.Store(false)
	start, most := time.Now(), backupMax.get()
	out := &backupWriter{w: w, rc: http.NewResponseController(w), stall: backupStall.get(), end: start.Add(most)}
	ctx, cancel := context.WithDeadline(r.Context(), out.end)
	defer cancel()
	info, err := b.s.e.Backup(ctx, out)
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("the backup took longer than %s, the most one may take; read it faster (or from closer)", most)
	}
	if !out.started {
		// Nothing was sent: an ordinary error answer.
		if err == nil {
			err = errors.New("the backup wrote nothing")
		}
		b.s.log.Warn("backup refused", "err", err)
		writeErr(w, err)
		return
	}
	h := w.Header()
	if err != nil {
		msg := err.Error()
		if out.err != nil {
			msg = "the client stopped reading: " + out.err.Error()
		}
		h.Set(BackupErrorTrailer, strings.ReplaceAll(msg, "\n", " "))
		b.s.log.Warn("backup ended before its end", "err", msg, "bytes", out.n, "took", time.Since(start).Round(time.Millisecond))
		return
	}
	h.Set(BackupKeysTrailer, strconv.Itoa(info.Keys))
	h.Set(BackupNodesTrailer, strconv.Itoa(info.Nodes))
	b.s.log.Info("backup sent", "keys", info.Keys, "nodes", info.Nodes, "bytes", out.n, "read_ts", info.ReadTs,
		"took", time.Since(start).Round(time.Millisecond))
}

// backupWriter sends the answer's header at the first byte (an error
// before it is an ordinary error answer), and bounds each write by
// stall, and never past the whole backup's end.
type backupWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	stall   time.Duration
	end     time.Time
	started bool
	n       int64
	err     error
}

func (b *backupWriter) Write(p []byte) (int, error) {
	if !b.started {
		b.started = true
		h := b.w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="coordinator-%s.backup"`, time.Now().UTC().Format("20060102T150405Z")))
		h.Set("Trailer", BackupErrorTrailer+", "+BackupKeysTrailer+", "+BackupNodesTrailer)
		b.w.WriteHeader(http.StatusOK)
	}
	// A writer that cannot have a deadline (a test's recorder) writes
	// without one.
	dl := time.Now().Add(b.stall)
	if b.end.Before(dl) {
		dl = b.end
	}
	_ = b.rc.SetWriteDeadline(dl)
	n, err := b.w.Write(p)
	b.n += int64(n)
	if err != nil && b.err == nil {
		b.err = err
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (the backup's
// write deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
