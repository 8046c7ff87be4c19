// Package bootmedia is the boot parameters medium: a tiny ISO9660 image
// that carries one boot's kernel-command-line parameters (bm.node=...
// bm.password=...) next to the generic ramdisk ISO, for boots without
// DHCP through a BMC's virtual media. The edge agent makes the image
// (ParamsImage); the ramdisk finds it among its block devices and reads
// it (ReadParams).
//
// The image is written by hand, not by a tool: 16 sectors of system area,
// the primary volume descriptor (volume ID BMPARAMS), the terminator, the
// two path tables, the root directory and the one file BMPARAMS.TXT. Its
// bytes depend only on the parameters (fixed timestamps).
//
// ReadParams reads images from outside (any medium a BMC presents): it
// checks every size and position against the image before reading and
// never reads more than a few sectors and MaxParams bytes.
package bootmedia

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

const (
	// VolumeID is the ISO9660 volume identifier of a parameters medium.
	VolumeID = "BMPARAMS"
	// FileName is the file in the root directory that holds the parameters.
	FileName = "BMPARAMS.TXT"
	// MaxParams is the largest parameter text, in bytes.
	MaxParams = 4096
	// SectorSize is ISO9660's logical block size (the only one supported).
	SectorSize = 2048
)

// Layout of the images ParamsImage writes, in sectors.
const (
	pvdSector   = 16
	termSector  = 17
	lPathSector = 18
	mPathSector = 19
	rootSector  = 20
	fileSector  = 21
)

// maxRootDir bounds the root directory ReadParams reads: a parameters
// medium made by another tool (xorriso, genisoimage) has a few entries.
const maxRootDir = 64 * SectorSize

// maxDescriptors bounds the volume descriptors ReadParams looks at for the
// primary one (an El Torito or Joliet image has a few before it).
const maxDescriptors = 32

// ErrNotParams says that a medium is no parameters medium: not ISO9660,
// or another volume ID. The ramdisk skips such devices quietly.
var ErrNotParams = errors.New("not a boot parameters medium")

// CheckParams returns an error if params cannot go on a medium: longer
// than MaxParams, or holding a NUL, a newline or another control
// character (the text is one kernel command line), or not UTF-8.
func CheckParams(params string) error {
	if len(params) > MaxParams {
		return fmt.Errorf("boot parameters are %d bytes, more than %d", len(params), MaxParams)
	}
	if !utf8.ValidString(params) {
		return errors.New("boot parameters are not UTF-8")
	}
	for i := 0; i < len(params); i++ {
		c := params[i]
		switch {
		case c == 0:
			return fmt.Errorf("boot parameters hold a NUL byte at %d", i)
		case c == '\n' || c == '\r':
			return fmt.Errorf("boot parameters hold a line break at %d (one command line expected)", i)
		case c < 0x20 && c != '\t', c == 0x7f:
			return fmt.Errorf("boot parameters hold control character %#02x at %d", c, i)
		}
	}
	return nil
}

// Fixed recording time of every image: 2000-01-01 00:00:00 UTC.
var (
	recDate = [7]byte{100, 1, 1, 0, 0, 0, 0}        // years since 1900, month, day, h, m, s, GMT offset
	volDate = append([]byte("2000010100000000"), 0) // 17-byte volume descriptor date
	noDate  = append([]byte("0000000000000000"), 0) // "not specified"
	spaces  = bytes.Repeat([]byte{' '}, 128)        // padding of identifier fields
	le, be  = binary.LittleEndian, binary.BigEndian // ISO9660's both-endian fields
)

// ParamsImage returns a parameters medium holding params (kernel command
// line syntax, for example "bm.node=UUID bm.password=..."). The image is
// a few sectors over 42 KiB; the same params always give the same bytes.
func ParamsImage(params string) ([]byte, error) {
	if err := CheckParams(params); err != nil {
		return nil, err
	}
	fileSectors := (len(params) + SectorSize - 1) / SectorSize
	if fileSectors == 0 {
		fileSectors = 1 // an empty file still gets its (zero) sector
	}
	total := fileSector + fileSectors
	img := make([]byte, total*SectorSize)
	sector := func(n int) []byte { return img[n*SectorSize : (n+1)*SectorSize] }

	// Primary volume descriptor.
	p := sector(pvdSector)
	p[0] = 1
	copy(p[1:6], "CD001")
	p[6] = 1
	pad(p[8:40], "")        // system identifier
	pad(p[40:72], VolumeID) // volume identifier
	both32(p[80:88], uint32(total))
	both16(p[120:124], 1) // volume set size
	both16(p[124:128], 1) // volume sequence number
	both16(p[128:132], SectorSize)
	both32(p[132:140], 10) // path table size: the root's entry
	le.PutUint32(p[140:144], lPathSector)
	be.PutUint32(p[148:152], mPathSector)
	dirRecord(p[156:190], rootSector, SectorSize, true, "\x00")
	pad(p[190:318], "") // volume set
	pad(p[318:446], "") // publisher
	pad(p[446:574], "") // data preparer
	pad(p[574:702], "BMEDGE BOOTMEDIA")
	pad(p[702:739], "") // copyright file
	pad(p[739:776], "") // abstract file
	pad(p[776:813], "") // bibliographic file
	copy(p[813:830], volDate)
	copy(p[830:847], volDate)
	copy(p[847:864], noDate)
	copy(p[864:881], noDate)
	p[881] = 1 // file structure version

	// Volume descriptor set terminator.
	t := sector(termSector)
	t[0] = 255
	copy(t[1:6], "CD001")
	t[6] = 1

	// Path tables: the root alone (identifier 0x00, parent 1).
	for _, pt := range []struct {
		n     int
		order binary.ByteOrder
	}{{lPathSector, le}, {mPathSector, be}} {
		s := sector(pt.n)
		s[0] = 1
		pt.order.PutUint32(s[2:6], rootSector)
		pt.order.PutUint16(s[6:8], 1)
	}

	// Root directory: ".", "..", BMPARAMS.TXT;1.
	r := sector(rootSector)
	off := dirRecord(r, rootSector, SectorSize, true, "\x00")
	off += dirRecord(r[off:], rootSector, SectorSize, true, "\x01")
	dirRecord(r[off:], fileSector, uint32(len(params)), false, FileName+";1")

	copy(img[fileSector*SectorSize:], params)
	return img, nil
}

// dirRecord writes a directory record into b and returns its length.
func dirRecord(b []byte, extent, size uint32, dir bool, id string) int {
	n := 33 + len(id)
	if n%2 == 1 {
		n++
	}
	b[0] = byte(n)
	both32(b[2:10], extent)
	both32(b[10:18], size)
	copy(b[18:25], recDate[:])
	if dir {
		b[25] = 2
	}
	both16(b[28:32], 1)
	b[32] = byte(len(id))
	copy(b[33:], id)
	return n
}

func pad(b []byte, s string) {
	copy(b, spaces)
	copy(b, s)
}

func both16(b []byte, v uint16) {
	le.PutUint16(b[0:2], v)
	be.PutUint16(b[2:4], v)
}

func both32(b []byte, v uint32) {
	le.PutUint32(b[0:4], v)
	be.PutUint32(b[4:8], v)
}

// ReadParams reads the parameter text of a parameters medium of size
// bytes. It returns an error wrapping ErrNotParams for anything that is
// not an ISO9660 volume with volume ID BMPARAMS, and a plain error for a
// BMPARAMS volume it cannot use (no BMPARAMS.TXT, sizes out of bounds,
// text longer than MaxParams or with a NUL). The text is returned with
// surrounding white space (a final newline) removed; it passes
// CheckParams.
func ReadParams(r io.ReaderAt, size int64) (string, error) {
	if size < (pvdSector+2)*SectorSize {
		return "", fmt.Errorf("%w: %d bytes is too small for ISO9660", ErrNotParams, size)
	}
	sec := make([]byte, SectorSize)
	readSector := func(n int64) error {
		if n < 0 || (n+1)*SectorSize > size {
			return fmt.Errorf("sector %d is beyond the medium's %d bytes", n, size)
		}
		if _, err := r.ReadAt(sec, n*SectorSize); err != nil {
			return fmt.Errorf("read sector %d: %w", n, err)
		}
		return nil
	}
	// The primary volume descriptor: the first of type 1 in the set.
	var pvd []byte
	for i := int64(0); i < maxDescriptors && pvd == nil; i++ {
		if err := readSector(pvdSector + i); err != nil {
			if i == 0 {
				return "", err
			}
			return "", fmt.Errorf("%w: no primary volume descriptor (%v)", ErrNotParams, err)
		}
		if string(sec[1:6]) != "CD001" {
			if i == 0 {
				return "", fmt.Errorf("%w: no ISO9660 volume descriptor (no CD001 at sector 16)", ErrNotParams)
			}
			return "", fmt.Errorf("%w: volume descriptor %d has no CD001 identifier", ErrNotParams, pvdSector+i)
		}
		switch sec[0] {
		case 1:
			pvd = append([]byte(nil), sec...)
		case 255:
			return "", fmt.Errorf("%w: ISO9660 volume without a primary volume descriptor", ErrNotParams)
		}
	}
	if pvd == nil {
		return "", fmt.Errorf("%w: no primary volume descriptor in the first %d", ErrNotParams, maxDescriptors)
	}
	if vol := strings.TrimRight(string(pvd[40:72]), " \x00"); vol != VolumeID {
		return "", fmt.Errorf("%w: ISO9660 volume ID %q, not %s", ErrNotParams, vol, VolumeID)
	}
	bs, err := get16(pvd[128:132], "logical block size")
	if err != nil {
		return "", err
	}
	if bs != SectorSize {
		return "", fmt.Errorf("logical block size %d is not supported (want %d)", bs, SectorSize)
	}
	root, err := parseRecord(pvd[156:190])
	if err != nil {
		return "", fmt.Errorf("root directory record: %w", err)
	}
	if !root.dir {
		return "", errors.New("the root directory record is not a directory")
	}
	if root.size == 0 || root.size > maxRootDir {
		return "", fmt.Errorf("root directory of %d bytes (want 1 to %d)", root.size, maxRootDir)
	}
	sectors := (int64(root.size) + SectorSize - 1) / SectorSize
	if int64(root.extent)+sectors > size/SectorSize {
		return "", fmt.Errorf("root directory at sector %d (%d bytes) is beyond the medium's %d bytes", root.extent, root.size, size)
	}
	var file *record
	for s := int64(0); s < sectors && file == nil; s++ {
		if err := readSector(int64(root.extent) + s); err != nil {
			return "", fmt.Errorf("root directory: %w", err)
		}
		end := int64(SectorSize)
		if rest := int64(root.size) - s*SectorSize; rest < end {
			end = rest
		}
		// Records never cross a sector; a zero length ends the sector's records.
		for off := int64(0); off < end && sec[off] != 0; {
			n := int64(sec[off])
			if off+n > end {
				return "", fmt.Errorf("root directory record at byte %d of sector %d overruns it", off, int64(root.extent)+s)
			}
			rec, err := parseRecord(sec[off : off+n])
			if err != nil {
				return "", fmt.Errorf("root directory record at byte %d of sector %d: %w", off, int64(root.extent)+s, err)
			}
			if !rec.dir && matchName(rec.id) {
				file = &rec
				break
			}
			off += n
		}
	}
	if file == nil {
		return "", fmt.Errorf("volume %s has no %s in its root directory", VolumeID, FileName)
	}
	if file.multi {
		return "", fmt.Errorf("%s is a multi-extent file", FileName)
	}
	if file.size > MaxParams {
		return "", fmt.Errorf("%s is %d bytes, more than %d", FileName, file.size, MaxParams)
	}
	if int64(file.extent)*SectorSize+int64(file.size) > size {
		return "", fmt.Errorf("%s at sector %d (%d bytes) is beyond the medium's %d bytes", FileName, file.extent, file.size, size)
	}
	text := make([]byte, file.size)
	if _, err := r.ReadAt(text, int64(file.extent)*SectorSize); err != nil && !(err == io.EOF && file.size == 0) {
		return "", fmt.Errorf("read %s: %w", FileName, err)
	}
	// A file written by hand (echo ... > BMPARAMS.TXT) ends in a newline.
	out := strings.TrimSpace(string(text))
	if err := CheckParams(out); err != nil {
		return "", fmt.Errorf("%s: %w", FileName, err)
	}
	return out, nil
}

type record struct {
	extent, size uint32
	dir, multi   bool
	id           string
}

// parseRecord parses one directory record (b is exactly its length).
func parseRecord(b []byte) (record, error) {
	if len(b) < 34 || int(b[0]) != len(b) {
		return record{}, fmt.Errorf("record length %d (of %d bytes) is too short", b[0], len(b))
	}
	idLen := int(b[32])
	if 33+idLen > len(b) || idLen == 0 {
		return record{}, fmt.Errorf("identifier length %d does not fit a record of %d bytes", idLen, len(b))
	}
	ext, err := get32(b[2:10], "extent")
	if err != nil {
		return record{}, err
	}
	sz, err := get32(b[10:18], "data length")
	if err != nil {
		return record{}, err
	}
	return record{extent: ext, size: sz, dir: b[25]&2 != 0, multi: b[25]&0x80 != 0, id: string(b[33 : 33+idLen])}, nil
}

// matchName says whether a file identifier names BMPARAMS.TXT: ISO9660
// appends a version (";1"); a name without extension may end in a dot.
func matchName(id string) bool {
	if i := strings.IndexByte(id, ';'); i >= 0 {
		id = id[:i]
	}
	return strings.EqualFold(strings.TrimSuffix(id, "."), FileName)
}

func get16(b []byte, what string) (uint16, error) {
	v := le.Uint16(b[0:2])
	if v != be.Uint16(b[2:4]) {
		return 0, fmt.Errorf("%s: the little-endian (%d) and big-endian (%d) halves differ", what, v, be.Uint16(b[2:4]))
	}
	return v, nil
}

func get32(b []byte, what string) (uint32, error) {
	v := le.Uint32(b[0:4])
	if v != be.Uint32(b[4:8]) {
		return 0, fmt.Errorf("%s: the little-endian (%d) and big-endian (%d) halves differ", what, v, be.Uint32(b[4:8]))
	}
	return v, nil
}
