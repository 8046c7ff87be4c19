package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// qcow2 parsing: the header, the L1 table and the L2 tables, as the qcow2
// specification (qemu docs/interop/qcow2.txt) defines them. Everything
// here reads bytes the image server chose; it never trusts a length or an
// offset before checking it, and it allocates nothing in proportion to a
// number read from the image beyond the bounds below.

// qcowMagic starts every qcow2 file.
var qcowMagic = []byte("QFI\xfb")

// Bounds on what a qcow2 image may ask of the ramdisk.
const (
	// qcowV2HeaderLen is the length of a version 2 header (and of the
	// part of a version 3 header that version 2 has).
	qcowV2HeaderLen = 72
	// qcowV3HeaderLen is the shortest version 3 header.
	qcowV3HeaderLen = 104
	// qcowMinClusterBits and qcowMaxClusterBits are qemu's limits (512
	// bytes to 2 MiB clusters).
	qcowMinClusterBits = 9
	qcowMaxClusterBits = 21
	// qcowMaxL1Bytes is qemu's limit on the L1 table (QCOW_MAX_L1_SIZE).
	qcowMaxL1Bytes = 32 << 20
	// qcowMaxExtents bounds the extents (runs of contiguous clusters,
	// single compressed clusters, tables) kept in memory while the image
	// streams: 40 bytes each with their place in the queue, and 32 more
	// for a table read ahead (its digest): at most 72 MiB. A compressed
	// image with 64 KiB clusters holds up to 64 GiB of data within it.
	// (A variable for the tests.)
	defaultQcowMaxExtents = 1 << 20
	// qcowMaxRun caps one uncompressed extent.
	qcowMaxRun = 1 << 30
)

var qcowMaxExtents = defaultQcowMaxExtents

// Incompatible feature bits of a version 3 header.
const (
	qcowIncompatDirty       = 1 << 0
	qcowIncompatCorrupt     = 1 << 1
	qcowIncompatDataFile    = 1 << 2
	qcowIncompatCompression = 1 << 3
	qcowIncompatExtendedL2  = 1 << 4
)

// L1 and L2 entry fields.
const (
	qcowOffsetMask     = 0x00fffffffffffe00 // bits 9-55: a cluster's offset
	qcowFlagCompressed = 1 << 62
	qcowFlagZero       = 1 << 0
)

// Compression types of compressed clusters.
const (
	qcowZlib = "zlib"
	qcowZstd = "zstd"
)

// qcowHeader is what the writer needs from a qcow2 header.
type qcowHeader struct {
	version     uint32
	clusterBits uint32
	clusterSize uint64
	// size is the virtual disk size: the bytes the image stands for.
	size uint64
	// l1Offset and l1Entries locate the part of the L1 table that maps
	// [0, size): the entries past it are never read.
	l1Offset  uint64
	l1Entries uint64
	// compression is the type of the compressed clusters.
	compression string
}

// l2Entries is the number of entries in an L2 table (one cluster).
func (h *qcowHeader) l2Entries() uint64 { return h.clusterSize / 8 }

// l1Bytes is the length of the part of the L1 table that is read.
func (h *qcowHeader) l1Bytes() uint64 { return h.l1Entries * 8 }

// qcowRefused is an image this ramdisk does not write, and why.
type qcowRefused struct{ why string }

func (e *qcowRefused) Error() string { return e.why }

func refuse(format string, a ...any) error { return &qcowRefused{fmt.Sprintf(format, a...)} }

// errQcowShortHeader means b does not hold the whole header.
var errQcowShortHeader = errors.New("the qcow2 header is cut short: the file is truncated or not qcow2")

// parseQcowHeader reads the header at the start of a qcow2 file. b is the
// file's first bytes, as many as are at hand (at least the header; the
// backing file's name, if it is within b, is named in the refusal).
func parseQcowHeader(b []byte) (qcowHeader, error) {
	var h qcowHeader
	if len(b) < qcowV2HeaderLen || string(b[:4]) != string(qcowMagic) {
		return h, errQcowShortHeader
	}
	be := binary.BigEndian
	h.version = be.Uint32(b[4:])
	if h.version != 2 && h.version != 3 {
		return h, refuse("qcow2 version %d is not supported (only 2 and 3 are); convert the image with 'qemu-img convert -O qcow2'", h.version)
	}
	backingOff, backingLen := be.Uint64(b[8:]), be.Uint32(b[16:])
	h.clusterBits = be.Uint32(b[20:])
	h.size = be.Uint64(b[24:])
	crypt := be.Uint32(b[32:])
	l1Size := uint64(be.Uint32(b[36:]))
	h.l1Offset = be.Uint64(b[40:])
	h.compression = qcowZlib
	if backingOff != 0 {
		name := ""
		if backingLen > 0 && backingLen <= 1023 && backingOff < uint64(len(b)) && uint64(len(b))-backingOff >= uint64(backingLen) {
			name = " " + strconv.Quote(string(b[backingOff:backingOff+uint64(backingLen)]))
		}
		return h, refuse("the qcow2 image has a backing file%s, which the ramdisk cannot read; flatten it with 'qemu-img convert -O qcow2 IMAGE FLAT.qcow2' (no -B) and deploy the result", name)
	}
	if crypt != 0 {
		return h, refuse("the qcow2 image is encrypted (method %d), which is not supported; deploy an unencrypted image (encrypt the installed system instead)", crypt)
	}
	if h.clusterBits < qcowMinClusterBits || h.clusterBits > qcowMaxClusterBits {
		return h, refuse("the qcow2 header's cluster size 2^%d is invalid (qemu allows 2^%d to 2^%d); the image is corrupt", h.clusterBits, qcowMinClusterBits, qcowMaxClusterBits)
	}
	h.clusterSize = 1 << h.clusterBits
	if h.version == 3 {
		if len(b) < qcowV3HeaderLen {
			return h, errQcowShortHeader
		}
		incompat := be.Uint64(b[72:])
		hdrLen := be.Uint32(b[100:])
		if hdrLen < qcowV3HeaderLen {
			return h, refuse("the qcow2 header's length %d is shorter than version 3's %d bytes; the image is corrupt", hdrLen, qcowV3HeaderLen)
		}
		switch {
		case incompat&qcowIncompatCorrupt != 0:
			return h, refuse("the qcow2 image is marked corrupt; repair it with 'qemu-img check -r all' or convert it again, then deploy it")
		case incompat&qcowIncompatDataFile != 0:
			return h, refuse("the qcow2 image keeps its data in an external data file, which the ramdisk cannot read; convert it with 'qemu-img convert -O qcow2' into a self-contained image")
		case incompat&qcowIncompatExtendedL2 != 0:
			return h, refuse("the qcow2 image has extended L2 entries (subclusters, extended_l2=on), which are not supported; convert it with 'qemu-img convert -O qcow2' (extended_l2=off, the default)")
		}
		if unknown := incompat &^ (qcowIncompatDirty | qcowIncompatCompression); unknown != 0 {
			return h, refuse("the qcow2 image uses incompatible features unknown to the ramdisk (bits %#x); convert it with 'qemu-img convert -O qcow2 -o compat=1.1'", unknown)
		}
		if incompat&qcowIncompatCompression != 0 {
			if hdrLen <= 104 || len(b) < 105 {
				return h, refuse("the qcow2 header sets the compression type feature but has no compression type field; the image is corrupt")
			}
			switch b[104] {
			case 0:
			case 1:
				h.compression = qcowZstd
			default:
				return h, refuse("the qcow2 image's compression type %d is not supported (zlib and zstd are)", b[104])
			}
		}
		// The dirty bit (lazy refcounts not written back) leaves the L1
		// and L2 tables valid; only reference counts, which a reader does
		// not need, may be stale.
	}
	if h.size == 0 {
		return h, refuse("the qcow2 image's virtual size is 0: there is nothing to write; check the image")
	}
	if h.l1Offset%h.clusterSize != 0 {
		return h, refuse("the qcow2 L1 table offset %d is not aligned to the %d-byte cluster size; the image is corrupt", h.l1Offset, h.clusterSize)
	}
	perL1 := h.clusterSize * h.l2Entries() // guest bytes one L1 entry maps
	need := (h.size-1)/perL1 + 1
	if need > l1Size {
		return h, refuse("the qcow2 L1 table has %d entries but the virtual size %d needs %d; the image is corrupt", l1Size, h.size, need)
	}
	if need*8 > qcowMaxL1Bytes {
		return h, refuse("the qcow2 image's L1 table would be %d bytes, over qemu's limit of %d; the image is corrupt", need*8, qcowMaxL1Bytes)
	}
	if h.l1Offset > 1<<56 {
		return h, refuse("the qcow2 L1 table offset %d is out of range; the image is corrupt", h.l1Offset)
	}
	h.l1Entries = need
	return h, nil
}

// parseQcowL1 returns the offsets of the L2 tables in an L1 table (the
// l1Bytes() bytes at l1Offset), 0 for an L1 entry without one (its guest
// range reads as zeros).
func (h *qcowHeader) parseQcowL1(l1 []byte) ([]uint64, error) {
	if uint64(len(l1)) != h.l1Bytes() {
		return nil, fmt.Errorf("qcow2 L1 table: got %d bytes, want %d", len(l1), h.l1Bytes())
	}
	out := make([]uint64, h.l1Entries)
	for i := range out {
		off := binary.BigEndian.Uint64(l1[i*8:]) & qcowOffsetMask
		if off%h.clusterSize != 0 {
			return nil, refuse("qcow2 L1 entry %d points to offset %d, which is not aligned to the %d-byte cluster size; the image is corrupt", i, off, h.clusterSize)
		}
		out[i] = off
	}
	return out, nil
}

// extent is a piece of the qcow2 file the writer acts on as it streams by:
// data to write at a guest offset, a compressed cluster to inflate and
// write, or a table (L1, L2) to read or check.
type extent struct {
	host  uint64 // offset in the qcow2 file
	guest uint64 // data: where on the disk; L2 table: its L1 index
	n     uint32 // length in the file
	kind  uint8
	// sum is, for a table read ahead by a Range request, the index of
	// its sha256 in qcowWriter.sums (the streamed bytes must match).
	sum int32
}

const (
	extData uint8 = iota // n bytes written as they are
	extCompressed
	extL1
	extL2
)

// parseQcowL2 adds the data extents that an L2 table (one cluster, the
// table of L1 entry l1Index) maps to exts, merging runs of clusters that
// are contiguous both in the file and on the disk. Zero and unallocated
// clusters add nothing: the writer zeroes whatever no extent covers.
func (h *qcowHeader) parseQcowL2(l2 []byte, l1Index uint64, exts []extent) ([]extent, error) {
	if uint64(len(l2)) != h.clusterSize {
		return exts, fmt.Errorf("qcow2 L2 table: got %d bytes, want %d", len(l2), h.clusterSize)
	}
	first := len(exts)
	csizeShift := 62 - (h.clusterBits - 8)
	csizeMask := uint64(1)<<(h.clusterBits-8) - 1
	coffMask := uint64(1)<<csizeShift - 1
	base := l1Index * h.l2Entries() * h.clusterSize
	for j := uint64(0); j < h.l2Entries(); j++ {
		guest := base + j*h.clusterSize
		if guest >= h.size {
			break
		}
		e := binary.BigEndian.Uint64(l2[j*8:])
		if e&qcowFlagCompressed != 0 {
			coff := e & coffMask
			sectors := (e>>csizeShift)&csizeMask + 1
			csize := sectors*512 - coff&511
			if coff+csize > 1<<56 {
				return exts, refuse("qcow2 L2 entry for disk offset %d points out of range; the image is corrupt", guest)
			}
			if len(exts) >= qcowMaxExtents {
				return exts, errTooManyExtents()
			}
			exts = append(exts, extent{host: coff, guest: guest, n: uint32(csize), kind: extCompressed, sum: -1})
			continue
		}
		off := e & qcowOffsetMask
		if e&qcowFlagZero != 0 || off == 0 {
			continue
		}
		if off%h.clusterSize != 0 {
			return exts, refuse("qcow2 L2 entry for disk offset %d points to offset %d, which is not aligned to the %d-byte cluster size; the image is corrupt", guest, off, h.clusterSize)
		}
		if k := len(exts) - 1; k >= first {
			p := &exts[k]
			if p.kind == extData && p.host+uint64(p.n) == off && p.guest+uint64(p.n) == guest && uint64(p.n)+h.clusterSize <= qcowMaxRun {
				p.n += uint32(h.clusterSize)
				continue
			}
		}
		if len(exts) >= qcowMaxExtents {
			return exts, errTooManyExtents()
		}
		exts = append(exts, extent{host: off, guest: guest, n: uint32(h.clusterSize), kind: extData, sum: -1})
	}
	return exts, nil
}

func errTooManyExtents() error {
	return refuse("the qcow2 image is fragmented into more than %d separate pieces, more than the ramdisk keeps track of; rewrite it with 'qemu-img convert -O qcow2' (64 KiB clusters) or deploy it as raw", qcowMaxExtents)
}
