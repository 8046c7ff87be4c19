package bootmedia

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"
)

// boundedReader is the medium as ReadParams sees it: it fails the test
// when ReadParams reads outside the size it was given or asks for more
// bytes at once than a sector or MaxParams (an allocation driven by a
// length from the image).
type boundedReader struct {
	t    *testing.T
	data []byte
	size int64
	read int64
}

func (r *boundedReader) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > max(SectorSize, MaxParams) {
		r.t.Fatalf("ReadAt of %d bytes, more than a sector or MaxParams", len(p))
	}
	if off < 0 || off+int64(len(p)) > r.size {
		r.t.Fatalf("ReadAt(%d bytes at %d) outside the medium's %d bytes", len(p), off, r.size)
	}
	r.read += int64(len(p))
	if off >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// FuzzReadParams feeds arbitrary media to ReadParams, the one function
// of the ramdisk that parses a device's bytes before anything else. It
// must never panic, never read outside the medium nor more than the
// descriptors, the bounded root directory and MaxParams, and a text it
// accepts has no NUL or line break, is at most MaxParams bytes and goes
// back through ParamsImage unchanged.
//
// An image is 16 sectors of system area and then a few sectors that
// matter; fuzzing whole images wastes the fuzzer on the system area, so
// an input is: raw, the image after the system area (empty: a valid
// image of fuzzParams); patches, 3 bytes each (an offset from sector 16,
// big-endian, and the byte to put there), applied to it; and sizeDelta,
// added to the image's length to give the size ReadParams is told (the
// medium may claim more bytes than it holds, or fewer).
func FuzzReadParams(f *testing.F) {
	const sys = pvdSector * SectorSize
	fuzzParams := "bm.node=n1 bm.password=p"
	good, err := ParamsImage(fuzzParams)
	if err != nil {
		f.Fatal(err)
	}
	for _, params := range []string{sample, "", strings.Repeat("y", MaxParams)} {
		img, err := ParamsImage(params)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(img[sys:], []byte(nil), int16(0))
	}
	patch := func(off int, b byte) []byte { return []byte{byte(off >> 8), byte(off), b} }
	root := (rootSector - pvdSector) * SectorSize
	fileRec := root + 34 + 34
	f.Add([]byte(nil), []byte(nil), int16(0))
	f.Add([]byte(nil), []byte(nil), int16(-SectorSize+5))                                         // the file cut off
	f.Add([]byte(nil), []byte(nil), int16(1000))                                                  // a medium that claims more than it holds
	f.Add([]byte(nil), append(patch(156+10+2, 0x10), patch(156+14+1, 0x10)...), int16(0))         // a root directory too large
	f.Add([]byte(nil), append(patch(fileRec+10+1, 0x10), patch(fileRec+14+2, 0x10)...), int16(0)) // a file too large
	f.Add([]byte(nil), patch(fileRec+33, 'X'), int16(0))                                          // no BMPARAMS.TXT
	f.Add([]byte(nil), patch(fileRec, 200), int16(0))                                             // a record overrunning
	f.Add([]byte(nil), patch(0, 255), int16(0))                                                   // the terminator first
	f.Add(make([]byte, 4*SectorSize), []byte(nil), int16(0))

	f.Fuzz(func(t *testing.T, raw, patches []byte, sizeDelta int16) {
		img := append(make([]byte, sys), raw...)
		if len(raw) == 0 {
			img = append([]byte(nil), good...)
		}
		for i := 0; i+3 <= len(patches); i += 3 {
			if tail := len(img) - sys; tail > 0 {
				img[sys+int(binary.BigEndian.Uint16(patches[i:]))%tail] = patches[i+2]
			}
		}
		size := max(int64(len(img))+int64(sizeDelta), 0)
		r := &boundedReader{t: t, data: img, size: size}
		text, err := ReadParams(r, size)
		// The descriptors, the root directory and the file, at most.
		if limit := int64((maxDescriptors+1)*SectorSize + maxRootDir + MaxParams); r.read > limit {
			t.Fatalf("read %d bytes, more than %d", r.read, limit)
		}
		if err != nil {
			if text != "" {
				t.Fatalf("error %v with text %q", err, text)
			}
			return
		}
		if len(text) > MaxParams || strings.ContainsAny(text, "\x00\n\r") {
			t.Fatalf("accepted text of %d bytes: %q", len(text), text)
		}
		again, err := ParamsImage(text)
		if err != nil {
			t.Fatalf("accepted text %q is refused by ParamsImage: %v", text, err)
		}
		back, err := ReadParams(bytes.NewReader(again), int64(len(again)))
		if err != nil || back != text {
			t.Fatalf("accepted text %q does not round trip: %v %q", text, err, back)
		}
	})
}

func ExampleParamsImage() {
	img, err := ParamsImage("bm.node=n1 bm.password=p")
	if err != nil {
		panic(err)
	}
	text, err := ReadParams(bytes.NewReader(img), int64(len(img)))
	fmt.Println(len(img), text, err)
	// Output: 45056 bm.node=n1 bm.password=p <nil>
}
