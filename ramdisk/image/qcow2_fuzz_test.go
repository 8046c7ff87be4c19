package image

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"os"
	"runtime/metrics"
	"testing"

	"github.com/bmedge/bmedge/ramdisk/disk"
)

// buildQcow2 makes a small qcow2 file of raw (a fuzzing seed that needs
// no qemu-img): header, L1 table, L2 tables, then the clusters, version
// 2 or 3, compressed (raw deflate, as qemu writes zlib clusters) or not.
// All-zero clusters are left unallocated; the refcount table is empty
// (qemu opens such an image to read it; a reader needs no refcounts).
func buildQcow2(raw []byte, clusterBits uint32, version uint32, compress bool) []byte {
	cs := uint64(1) << clusterBits
	size := uint64(len(raw))
	per := cs * (cs / 8)
	l1n := (size + per - 1) / per
	l1Off := 2 * cs // after the header and an empty refcount table
	l2Off := l1Off + (l1n*8+cs-1)/cs*cs
	dataOff := l2Off + l1n*cs
	out := make([]byte, dataOff)
	copy(out, qcowMagic)
	be := binary.BigEndian
	be.PutUint32(out[4:], version)
	be.PutUint32(out[20:], clusterBits)
	be.PutUint64(out[24:], size)
	be.PutUint32(out[36:], uint32(l1n))
	be.PutUint64(out[40:], l1Off)
	be.PutUint64(out[48:], cs)
	be.PutUint32(out[56:], 1)
	if version == 3 {
		be.PutUint32(out[96:], 4)
		be.PutUint32(out[100:], 104)
	}
	csizeShift := 62 - (clusterBits - 8)
	for i := uint64(0); i < l1n; i++ {
		be.PutUint64(out[l1Off+i*8:], (l2Off+i*cs)|1<<63)
	}
	for c := uint64(0); c*cs < size; c++ {
		data := make([]byte, cs)
		copy(data, raw[c*cs:min((c+1)*cs, size)])
		if bytes.Count(data, []byte{0}) == len(data) {
			continue
		}
		ent := l2Off + c*8 // L2 tables follow each other: entry c of them all
		if compress {
			var b bytes.Buffer
			w, _ := flate.NewWriter(&b, flate.BestSpeed)
			w.Write(data)
			w.Close()
			at := uint64(len(out))
			sectors := (at%512 + uint64(b.Len()) + 511) / 512
			if sectors-1 <= 1<<(clusterBits-8)-1 {
				out = append(out, b.Bytes()...)
				be.PutUint64(out[ent:], 1<<62|(sectors-1)<<csizeShift|at)
				continue
			}
		}
		at := (uint64(len(out)) + cs - 1) / cs * cs
		out = append(out, make([]byte, at-uint64(len(out)))...)
		out = append(out, data...)
		be.PutUint64(out[ent:], at|1<<63)
	}
	return out
}

// memDevice is a disk in memory that fails writes past its end.
type memDevice struct {
	b       []byte
	written uint64
}

func (m *memDevice) WriteAt(p []byte, off uint64) error {
	if off > uint64(len(m.b)) || uint64(len(p)) > uint64(len(m.b))-off {
		return fmt.Errorf("write of %d bytes at %d past the end of a %d-byte device", len(p), off, len(m.b))
	}
	copy(m.b[off:], p)
	m.written += uint64(len(p))
	return nil
}

// runQcow2 writes data as a qcow2 file onto a fresh memory device of
// size bytes, reading tables ahead (withRange) or from the stream.
func runQcow2(t *testing.T, data []byte, size int, withRange bool) (*memDevice, uint64, error) {
	dev := &memDevice{b: bytes.Repeat([]byte{0xAA}, size)}
	cr := &countingReader{r: bytes.NewReader(data), onRead: func() {}}
	br := bufio.NewReaderSize(cr, 64<<10)
	var r ranger
	if withRange {
		r = readerAtRanger{bytes.NewReader(data)}
	}
	d := disk.Device{Path: "mem", SizeBytes: uint64(size), Regular: true}
	n, err := writeQcow2(t.Context(), br, r, dev, d, Source{Reader: bytes.NewReader(nil)}, Options{BufferBytes: 8 << 10}, cr, uint64(len(data)))
	return dev, n, err
}

// FuzzQcow2 feeds arbitrary bytes as a qcow2 file (the image server's
// bytes) to the qcow2 writer, both ways it reads the tables: ahead by
// Range requests and from the stream. It must never panic, never write
// past the device or the image's virtual size, allocate at most its
// bounds, and on success have written every byte of the virtual size
// exactly once (data, or zeros for what the image does not map). When
// both ways succeed they must leave the same disk.
func FuzzQcow2(f *testing.F) {
	// Small seeds: the fuzzer minimises every input that finds new
	// code, one execution per step.
	raw := testImage(10 << 10)
	raw[9000] = 1 // a lone byte in a zero stretch
	for _, cb := range []uint32{9, 12} {
		for _, v := range []uint32{2, 3} {
			f.Add(buildQcow2(raw, cb, v, false))
			f.Add(buildQcow2(raw, cb, v, true))
		}
	}
	// Images made by qemu-img itself, when it is there (small clusters
	// keep them small).
	if _, err := os.Stat("/usr/bin/qemu-img"); err == nil {
		dir := f.TempDir()
		for i, opts := range [][]string{{"-o", "cluster_size=1024"}, {"-c", "-o", "cluster_size=4096"}, {"-c", "-o", "cluster_size=512,compat=0.10"}, {"-c", "-o", "cluster_size=2048,compression_type=zstd"}} {
			f.Add(qcowFixture(f, dir, raw, fmt.Sprintf("seed%d.qcow2", i), opts...))
		}
	}
	f.Add([]byte("QFI\xfb\x00\x00\x00\x03"))
	const size = 256 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(allocs)
		before := allocs[0].Value.Uint64()
		h, herr := parseQcowHeader(data[:min(len(data), 4096)])
		var devs [2]*memDevice
		var errs [2]error
		for i, withRange := range []bool{true, false} {
			dev, n, err := runQcow2(t, data, size, withRange)
			devs[i], errs[i] = dev, err
			if err != nil {
				continue
			}
			if herr != nil {
				t.Fatalf("success on an image whose header does not parse: %v", herr)
			}
			if n != h.size || dev.written != h.size {
				t.Fatalf("range=%v: wrote %d bytes (device saw %d), want the virtual size %d, each byte once", withRange, n, dev.written, h.size)
			}
			if h.size < size && !bytes.Equal(dev.b[h.size:], bytes.Repeat([]byte{0xAA}, size-int(h.size))) {
				t.Fatalf("range=%v: bytes past the virtual size %d were written", withRange, h.size)
			}
		}
		if errs[0] == nil && errs[1] == nil && !bytes.Equal(devs[0].b, devs[1].b) {
			t.Fatal("reading the tables ahead and from the stream wrote different disks")
		}
		metrics.Read(allocs)
		// Two runs, each: the tables and compressed clusters being
		// collected (qcowMaxBuffered), the extents, the window.
		if alloc := allocs[0].Value.Uint64() - before; alloc > 2*(qcowMaxBuffered+64<<20) {
			t.Fatalf("a %d-byte image allocated %d MiB", len(data), alloc>>20)
		}
	})
}

// TestQcow2Seeds: the fuzzing seeds are real qcow2 images (qemu-img reads
// them as raw, when it is there) that the writer writes right both ways.
func TestQcow2Seeds(t *testing.T) {
	raw := testImage(96 << 10)
	raw[5000] = 1
	for _, cb := range []uint32{9, 12, 16} {
		for _, v := range []uint32{2, 3} {
			for _, c := range []bool{false, true} {
				img := buildQcow2(raw, cb, v, c)
				name := fmt.Sprintf("clusters 2^%d v%d compressed %v", cb, v, c)
				if _, err := os.Stat("/usr/bin/qemu-img"); err == nil {
					p := t.TempDir() + "/seed.qcow2"
					os.WriteFile(p, img, 0o644)
					qemuImg(t, "convert", "-f", "qcow2", "-O", "raw", p, p+".raw")
					if back, _ := os.ReadFile(p + ".raw"); !bytes.Equal(back, raw) {
						t.Fatalf("%s: qemu-img reads the seed differently", name)
					}
				}
				for _, withRange := range []bool{true, false} {
					dev, n, err := runQcow2(t, img, 1<<20, withRange)
					if err != nil {
						t.Fatalf("%s range=%v: %v", name, withRange, err)
					}
					if n != uint64(len(raw)) || !bytes.Equal(dev.b[:len(raw)], raw) {
						t.Fatalf("%s range=%v: the disk differs from the raw image", name, withRange)
					}
				}
			}
		}
	}
}
