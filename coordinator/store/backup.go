package store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"golang.org/x/crypto/hkdf"

	"github.com/bmedge/bmedge/lib/kvstore"
)

// A backup is a consistent snapshot of the database (every key's newest
// value at one read timestamp of Badger), with the coordinator's files
// that belong with it, encrypted with a key derived from the database's
// key file: it holds BMC and rescue passwords, so it is never written in
// the clear.
//
// The file: a header, then the encrypted records in parts.
//
//	header  backupMagic (26 bytes), format version (1 byte, 1), cipher
//	        (1 byte, 1: AES-256-GCM), part size P (uint32 big-endian),
//	        salt (32 random bytes), key check (32 bytes)
//	parts   each a uint32 big-endian length whose top bit marks the last
//	        part, then that many bytes: AES-256-GCM of up to P bytes of
//	        records. Every part but the last holds P bytes exactly. The
//	        nonce is the part's number (big-endian, bytes 3..10) and a last
//	        part flag (byte 11); the header is the additional data.
//
// HKDF-SHA256 of the key file's 32 bytes with the salt, info
// backupInfo, gives 64 bytes: the AES key, then the key check, which
// tells a wrong key file from a damaged backup. A backup cut short (no
// last part), a part moved, dropped or changed, or a changed header
// fails to decrypt or check; nothing after the last part is allowed.
//
// The records, one after another across the parts: a tag byte, then
//
//	'H' uvarint length, JSON backupHead (first record)
//	'F' uvarint length, file name, uvarint length, the file's bytes
//	'K' uvarint length, key, uvarint length, value
//	'E' uvarint keys, uvarint files, uvarint read timestamp (last record)
const (
	backupMagic   = "bmedge-coordinator-backup\n"
	backupVersion = 1
	backupCipher  = 1
	// backupPart is the size of the parts' plaintext.
	backupPart   = 64 << 10
	backupHeader = len(backupMagic) + 1 + 1 + 4 + 32 + 32
	backupInfo   = "bmedge coordinator backup v1"
	// Bounds of what a backup may hold, checked before anything is read
	// into memory.
	maxBackupHead  = 64 << 10
	maxBackupKey   = 65000 // Badger's largest key
	maxBackupFile  = 1 << 20
	maxBackupFiles = 16
	maxBackupName  = 64
	// minBackupPart and maxBackupPart bound the part size a header may
	// name.
	minBackupPart = 4 << 10
	maxBackupPart = 1 << 20
	gcmOverhead   = 16
	lastPartFlag  = 1 << 31
)

// BackupInfo says what a backup holds.
type BackupInfo struct {
	// Created is when the snapshot was taken (the coordinator's clock).
	Created time.Time
	// ReadTs is Badger's read timestamp of the snapshot.
	ReadTs uint64
	// Keys is how many keys it holds, Nodes how many of them are nodes.
	Keys, Nodes int
	// Files are the names of the files it holds besides the database.
	Files []string
}

// backupHead is the first record.
type backupHead struct {
	Format  int       `json:"format"`
	Program string    `json:"program"`
	Created time.Time `json:"created_at"`
}

// Errors of a backup that cannot be read. Their messages say what to do.
var (
	// ErrBackupWrongKey: the key file is not the one the backup was made
	// with (or the header's salt or check was changed).
	ErrBackupWrongKey = errors.New("the key file does not open this backup: it was made with another db.key (restore needs the db.key of the data folder that was backed up), or its header is damaged")
	// ErrBackupTruncated: the file ends before its last part.
	ErrBackupTruncated = errors.New("the backup is truncated: it ends before its last part (an interrupted download or copy?); use another backup, or take a new one")
	// ErrBackupDamaged: a part does not decrypt, or what it holds is not
	// a backup's records.
	ErrBackupDamaged = errors.New("the backup is damaged or was changed after it was written")
	// ErrNotBackup: the file does not start with a backup's header.
	ErrNotBackup = errors.New("this is not a coordinator backup (it does not start with \"bmedge-coordinator-backup\"); give a file written by 'coordinator backup --out FILE'")
)

// ReadKey reads a database key file without creating one (LoadKey
// creates a key when there is none): it must hold KeySize bytes and be
// readable by its owner only.
func ReadKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the key file %s does not exist: give the db.key of the data folder that was backed up (--key-file)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("read the key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the key file %s has mode %04o, so users other than its owner may have read it: run 'chmod 600 %s'%s",
			path, fi.Mode().Perm(), path, names.Exposed)
	}
	if !fi.Mode().IsRegular() || fi.Size() != KeySize {
		return nil, fmt.Errorf("the key file %s holds %d bytes, not %d: it is not a coordinator's db.key", path, fi.Size(), KeySize)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the key file: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("the key file %s changed while it was read", path)
	}
	return key, nil
}

// backupKeys derives the AES key and the key check from the database key
// and the salt.
func backupKeys(key, salt []byte) (aead cipher.AEAD, check []byte, err error) {
	if len(key) != KeySize {
		return nil, nil, fmt.Errorf("the database key has %d bytes, want %d", len(key), KeySize)
	}
	out := make([]byte, 64)
	if _, err := io.ReadFull(hkdf.New(sha256.New, key, salt, []byte(backupInfo)), out); err != nil {
		return nil, nil, err
	}
	block, err := aes.NewCipher(out[:32])
	if err != nil {
		return nil, nil, err
	}
	aead, err = cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	return aead, out[32:], nil
}

func partNonce(n uint64, last bool) []byte {
	nonce := make([]byte, 12)
	binary.BigEndian.PutUint64(nonce[3:11], n)
	if last {
		nonce[11] = 1
	}
	return nonce
}

// sealer writes the encrypted parts.
type sealer struct {
	w      io.Writer
	aead   cipher.AEAD
	header []byte
	buf    []byte
	n      uint64
	out    []byte
}

func newSealer(w io.Writer, key []byte) (*sealer, error) {
	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	aead, check, err := backupKeys(key, salt)
	if err != nil {
		return nil, err
	}
	h := make([]byte, 0, backupHeader)
	h = append(h, backupMagic...)
	h = append(h, backupVersion, backupCipher)
	h = binary.BigEndian.AppendUint32(h, backupPart)
	h = append(h, salt...)
	h = append(h, check...)
	if _, err := w.Write(h); err != nil {
		return nil, err
	}
	return &sealer{w: w, aead: aead, header: h, buf: make([]byte, 0, backupPart)}, nil
}

func (s *sealer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), backupPart-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p = p[k:]
		if len(s.buf) == backupPart {
			if err := s.seal(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (s *sealer) seal(last bool) error {
	s.out = binary.BigEndian.AppendUint32(s.out[:0], 0)
	s.out = s.aead.Seal(s.out, partNonce(s.n, last), s.buf, s.header)
	l := uint32(len(s.out) - 4)
	if last {
		l |= lastPartFlag
	}
	binary.BigEndian.PutUint32(s.out, l)
	s.n++
	s.buf = s.buf[:0]
	_, err := s.w.Write(s.out)
	return err
}

// Close writes the last part.
func (s *sealer) Close() error { return s.seal(true) }

// backupHeaderOf reads and checks the header, and returns it with the
// part size.
func backupHeaderOf(r io.Reader) (header []byte, part int, err error) {
	h := make([]byte, backupHeader)
	n, err := io.ReadFull(r, h)
	if n < len(backupMagic) || !bytes.Equal(h[:len(backupMagic)], []byte(backupMagic)) {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, err
		}
		return nil, 0, ErrNotBackup
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, ErrBackupTruncated
		}
		return nil, 0, err
	}
	p := h[len(backupMagic):]
	if p[0] != backupVersion {
		return nil, 0, fmt.Errorf("the backup is of format %d, and this coordinator reads format %d: restore it with the version of the coordinator that made it, or a newer one", p[0], backupVersion)
	}
	if p[1] != backupCipher {
		return nil, 0, fmt.Errorf("%w: it names cipher %d, and format %d has only cipher %d", ErrBackupDamaged, p[1], backupVersion, backupCipher)
	}
	part = int(binary.BigEndian.Uint32(p[2:6]))
	if part < minBackupPart || part > maxBackupPart {
		return nil, 0, fmt.Errorf("%w: its header names parts of %d bytes", ErrBackupDamaged, part)
	}
	return h, part, nil
}

// nextPart reads one part's length and its bytes into buf; it reports
// whether it is the last.
func nextPart(r io.Reader, part int, n uint64, buf []byte) ([]byte, bool, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, false, ErrBackupTruncated
		}
		return nil, false, err
	}
	v := binary.BigEndian.Uint32(l[:])
	last := v&lastPartFlag != 0
	size := int(v &^ lastPartFlag)
	if size < gcmOverhead || size > part+gcmOverhead || (!last && size != part+gcmOverhead) {
		return nil, false, fmt.Errorf("%w: part %d has a length of %d bytes", ErrBackupDamaged, n, size)
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, false, ErrBackupTruncated
		}
		return nil, false, err
	}
	return buf, last, nil
}

// endOfFile checks that nothing follows the last part.
func endOfFile(r io.Reader) error {
	var b [1]byte
	n, err := io.ReadFull(r, b[:])
	if n > 0 {
		return fmt.Errorf("%w: bytes follow its last part", ErrBackupDamaged)
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// CheckBackupFrame reads a backup to its end and checks its framing: the
// header, every part's length, a last part, nothing after it. It needs no
// key, so it cannot tell a changed part (a restore does), but it tells a
// complete backup from a cut one. It returns the bytes read.
func CheckBackupFrame(r io.Reader) (int64, error) {
	cr := &countReader{r: r}
	_, part, err := backupHeaderOf(cr)
	if err != nil {
		return cr.n, err
	}
	buf := make([]byte, part+gcmOverhead)
	for n := uint64(0); ; n++ {
		_, last, err := nextPart(cr, part, n, buf)
		if err != nil {
			return cr.n, err
		}
		if last {
			return cr.n, endOfFile(cr)
		}
	}
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// opener reads the decrypted records of a backup.
type opener struct {
	r      io.Reader
	aead   cipher.AEAD
	header []byte
	part   int
	n      uint64
	in     []byte
	plain  []byte
	pos    int
	done   bool
}

func newOpener(r io.Reader, key []byte) (*opener, error) {
	h, part, err := backupHeaderOf(r)
	if err != nil {
		return nil, err
	}
	salt, check := h[backupHeader-64:backupHeader-32], h[backupHeader-32:]
	aead, want, err := backupKeys(key, salt)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(check, want) {
		return nil, ErrBackupWrongKey
	}
	return &opener{r: r, aead: aead, header: h, part: part, in: make([]byte, part+gcmOverhead)}, nil
}

func (o *opener) Read(p []byte) (int, error) {
	for o.pos == len(o.plain) {
		if o.done {
			return 0, io.EOF
		}
		in, last, err := nextPart(o.r, o.part, o.n, o.in)
		if err != nil {
			return 0, err
		}
		o.plain, err = o.aead.Open(o.plain[:0], partNonce(o.n, last), in, o.header)
		if err != nil {
			return 0, fmt.Errorf("%w: part %d does not authenticate", ErrBackupDamaged, o.n)
		}
		o.n++
		o.pos = 0
		if last {
			o.done = true
			if err := endOfFile(o.r); err != nil {
				return 0, err
			}
		}
	}
	n := copy(p, o.plain[o.pos:])
	o.pos += n
	return n, nil
}

// snapshots are the backups that read the store: Close stops them and
// waits for their reads to end before it closes Badger (a read of a
// closed Badger can crash the process).
type snapshots struct {
	mu      sync.Mutex
	closing bool
	stopc   chan struct{}
	running sync.WaitGroup
}

// begin registers a reader; false once the store is closing.
func (s *snapshots) begin() (stop <-chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, false
	}
	if s.stopc == nil {
		s.stopc = make(chan struct{})
	}
	s.running.Add(1)
	return s.stopc, true
}

// stop ends the running backups' reads and waits for them.
func (s *snapshots) stop() {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		if s.stopc != nil {
			close(s.stopc)
		}
	}
	s.mu.Unlock()
	s.running.Wait()
}

// errStoreClosing ends a backup whose store is being closed.
var errStoreClosing = errors.New("the coordinator is stopping; take the backup again once it runs")

// record is one key and value read by a backup.
type record struct{ k, v []byte }

// Backup writes to w a backup of the whole database as of one read
// timestamp, with files (name → bytes: the coordinator's other secrets
// that belong with the database), encrypted with a key derived from key
// (the database's key, KeySize bytes). Commits go on meanwhile; they are
// not in the backup. Badger is read in a goroutine of its own that hands
// each key and value over, so that whatever w does (a slow client, an
// error) happens outside the store's read; ctx ends the backup early, and
// so does Close.
func (s *Store) Backup(ctx context.Context, w io.Writer, key []byte, files map[string][]byte) (BackupInfo, error) {
	info := BackupInfo{Created: time.Now().UTC()}
	for name, b := range files {
		if err := backupFileName(name); err != nil {
			return info, err
		}
		if len(b) > maxBackupFile {
			return info, fmt.Errorf("file %s has %d bytes, a backup holds files of at most %d", name, len(b), maxBackupFile)
		}
	}
	if len(files) > maxBackupFiles {
		return info, fmt.Errorf("%d files, a backup holds at most %d", len(files), maxBackupFiles)
	}
	if err := s.Err(); err != nil {
		return info, err
	}
	bw := bufio.NewWriterSize(w, backupPart+4+gcmOverhead)
	seal, err := newSealer(bw, key)
	if err != nil {
		return info, err
	}
	rw := &recordWriter{w: seal}
	head, _ := json.Marshal(backupHead{Format: backupVersion, Program: "coordinator", Created: info.Created})
	rw.bytes('H', head)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		rw.pair('F', []byte(name), files[name])
	}
	info.Files = names
	if rw.err != nil {
		return info, rw.err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop, ok := s.snaps.begin()
	if !ok {
		return info, errStoreClosing
	}
	recs := make(chan record, 64)
	var readTs uint64
	readErr := make(chan error, 1)
	go func() {
		defer s.snaps.running.Done()
		defer close(recs)
		readErr <- s.view(func(txn *badger.Txn) error {
			readTs = txn.ReadTs()
			opts := badger.DefaultIteratorOptions
			opts.PrefetchSize = 16
			it := txn.NewIterator(opts)
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				// Badger is not called again once the store failed
				// (failure.go).
				if err := s.Err(); err != nil {
					return err
				}
				item := it.Item()
				if bytes.HasPrefix(item.Key(), []byte(flushPrefix)) {
					continue
				}
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				select {
				case recs <- record{item.KeyCopy(nil), v}:
				case <-ctx.Done():
					return ctx.Err()
				case <-stop:
					return errStoreClosing
				}
			}
			return nil
		})
	}()
	for r := range recs {
		if rw.err != nil {
			continue // drain until the reader sees the cancel
		}
		rw.pair('K', r.k, r.v)
		info.Keys++
		if bytes.HasPrefix(r.k, []byte(NodePrefix)) {
			info.Nodes++
		}
		if rw.err != nil {
			cancel()
		}
	}
	if err := <-readErr; err != nil {
		if rw.err != nil && !errors.Is(err, errStoreClosing) {
			return info, rw.err
		}
		return info, fmt.Errorf("read the database: %w", err)
	}
	if rw.err != nil {
		return info, rw.err
	}
	info.ReadTs = readTs
	rw.tag('E')
	rw.uvarint(uint64(info.Keys))
	rw.uvarint(uint64(len(names)))
	rw.uvarint(readTs)
	if rw.err != nil {
		return info, rw.err
	}
	if err := seal.Close(); err != nil {
		return info, err
	}
	return info, bw.Flush()
}

// backupFileName checks the name of a file a backup holds: a plain name
// in the data folder.
func backupFileName(name string) error {
	if name == "" || len(name) > maxBackupName || strings.ContainsAny(name, "/\\\x00") || name == "." || name == ".." {
		return fmt.Errorf("%q is not a file name a backup holds", name)
	}
	return nil
}

// recordWriter writes records, keeping the first error.
type recordWriter struct {
	w   io.Writer
	err error
	tmp [binary.MaxVarintLen64]byte
}

func (r *recordWriter) write(b []byte) {
	if r.err == nil {
		_, r.err = r.w.Write(b)
	}
}

func (r *recordWriter) tag(t byte) { r.write([]byte{t}) }

func (r *recordWriter) uvarint(v uint64) {
	n := binary.PutUvarint(r.tmp[:], v)
	r.write(r.tmp[:n])
}

func (r *recordWriter) bytes(t byte, b []byte) {
	r.tag(t)
	r.uvarint(uint64(len(b)))
	r.write(b)
}

func (r *recordWriter) pair(t byte, a, b []byte) {
	r.tag(t)
	r.uvarint(uint64(len(a)))
	r.write(a)
	r.uvarint(uint64(len(b)))
	r.write(b)
}

// readBackup decrypts and parses a whole backup, calling key for each key
// and value (nil: only check) and file for each file.
func readBackup(r io.Reader, dbKey []byte, key func(k, v []byte) error, file func(name string, b []byte) error) (BackupInfo, error) {
	var info BackupInfo
	o, err := newOpener(r, dbKey)
	if err != nil {
		return info, err
	}
	br := bufio.NewReaderSize(o, 64<<10)
	damaged := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBackupDamaged, fmt.Sprintf(format, a...))
	}
	// short: the records end before their end; the opener's own error
	// (truncated, damaged) comes first.
	short := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return damaged("its records end in the middle of one")
		}
		return err
	}
	field := func(max int, what string) ([]byte, error) {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, short(err)
		}
		if n > uint64(max) {
			return nil, damaged("%s of %d bytes, at most %d are possible", what, n, max)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, short(err)
		}
		return b, nil
	}
	first := true
	files := 0
	for {
		t, err := br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return info, damaged("it has no end record")
			}
			return info, err
		}
		if first != (t == 'H') {
			return info, damaged("record %q out of place", t)
		}
		switch t {
		case 'H':
			first = false
			b, err := field(maxBackupHead, "a head")
			if err != nil {
				return info, err
			}
			var h backupHead
			if err := json.Unmarshal(b, &h); err != nil || h.Format != backupVersion || h.Program != "coordinator" {
				return info, damaged("its head record is not a coordinator's of format %d", backupVersion)
			}
			info.Created = h.Created
		case 'F':
			name, err := field(maxBackupName, "a file name")
			if err != nil {
				return info, err
			}
			if err := backupFileName(string(name)); err != nil {
				return info, damaged("%v", err)
			}
			b, err := field(maxBackupFile, "a file")
			if err != nil {
				return info, err
			}
			if files++; files > maxBackupFiles {
				return info, damaged("more than %d files", maxBackupFiles)
			}
			info.Files = append(info.Files, string(name))
			if file != nil {
				if err := file(string(name), b); err != nil {
					return info, err
				}
			}
		case 'K':
			k, err := field(maxBackupKey, "a key")
			if err != nil {
				return info, err
			}
			if len(k) == 0 {
				return info, damaged("an empty key")
			}
			v, err := field(ValueLogFileSize, "a value")
			if err != nil {
				return info, err
			}
			info.Keys++
			if bytes.HasPrefix(k, []byte(NodePrefix)) {
				info.Nodes++
			}
			if key != nil {
				if err := key(k, v); err != nil {
					return info, err
				}
			}
		case 'E':
			var end [3]uint64
			for i := range end {
				if end[i], err = binary.ReadUvarint(br); err != nil {
					return info, short(err)
				}
			}
			if end[0] != uint64(info.Keys) || end[1] != uint64(files) {
				return info, damaged("it holds %d keys and %d files, its end record says %d and %d", info.Keys, files, end[0], end[1])
			}
			info.ReadTs = end[2]
			// The end record is the last: the opener then checks that
			// the last part ends here and nothing follows it.
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				if err != nil {
					return info, err
				}
				return info, damaged("records follow its end record")
			}
			return info, nil
		default:
			return info, damaged("unknown record %q", t)
		}
	}
}

// VerifyBackup reads the whole backup from r and checks it with the
// database key: every part decrypts and authenticates, the records are
// whole and end with an end record that counts them, nothing follows.
func VerifyBackup(r io.Reader, key []byte) (BackupInfo, error) {
	return readBackup(r, key, nil, nil)
}

// restoreBatchBytes is how many bytes of keys and values one commit of a
// restore writes at most.
const restoreBatchBytes = 4 << 20

// RestoreBackup writes the keys of the backup in r into a new database in
// dbDir (which must not hold one), encrypted with key, and returns the
// backup's files. The backup is checked as it is read; on an error the
// database written so far is left in dbDir, for the caller to remove (a
// restore writes into a folder of its own and moves it into place only
// once it is whole).
func RestoreBackup(r io.Reader, key []byte, dbDir string, log *slog.Logger) (BackupInfo, map[string][]byte, error) {
	if kvstore.HasDatabase(dbDir) {
		return BackupInfo{}, nil, fmt.Errorf("%s already holds a database; restore into an empty folder", dbDir)
	}
	st, err := Open(dbDir, key, log)
	if err != nil {
		return BackupInfo{}, nil, err
	}
	files := map[string][]byte{}
	var b Batch
	size := 0
	info, err := readBackup(r, key, func(k, v []byte) error {
		b.Set(string(k), v)
		size += len(k) + len(v)
		if size < restoreBatchBytes {
			return nil
		}
		err := st.Commit(context.Background(), &b)
		b, size = Batch{}, 0
		return err
	}, func(name string, data []byte) error {
		if _, dup := files[name]; dup {
			return fmt.Errorf("%w: file %s appears twice", ErrBackupDamaged, name)
		}
		files[name] = data
		return nil
	})
	if err == nil {
		err = st.Commit(context.Background(), &b)
	}
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return info, nil, err
	}
	return info, files, nil
}

// Replace makes the database hold exactly what the backup in r holds (a
// cluster member restoring a snapshot of the replicated log): the backup
// is first copied into a file in spoolDir and checked whole with key, so
// that a damaged or cut one changes nothing; then every key is dropped
// and the backup's keys are written. It returns the backup's files.
// Commits must not run meanwhile (the replicated log applies nothing
// while it restores).
func (s *Store) Replace(r io.Reader, key []byte, spoolDir string) (BackupInfo, map[string][]byte, error) {
	f, err := os.CreateTemp(spoolDir, ".snapshot-*")
	if err != nil {
		return BackupInfo{}, nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := readBackup(io.TeeReader(r, f), key, nil, nil); err != nil {
		return BackupInfo{}, nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return BackupInfo{}, nil, err
	}
	if err := s.db.DropPrefix(""); err != nil {
		return BackupInfo{}, nil, err
	}
	files := map[string][]byte{}
	var b Batch
	size := 0
	info, err := readBackup(bufio.NewReader(f), key, func(k, v []byte) error {
		b.Set(string(k), v)
		size += len(k) + len(v)
		if size < restoreBatchBytes {
			return nil
		}
		err := s.Commit(context.Background(), &b)
		b, size = Batch{}, 0
		return err
	}, func(name string, data []byte) error {
		files[name] = data
		return nil
	})
	if err == nil {
		err = s.Commit(context.Background(), &b)
	}
	if err != nil {
		return info, nil, err
	}
	return info, files, nil
}
