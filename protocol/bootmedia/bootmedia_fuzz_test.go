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
func FuzzReadParams(f *testing.F) {
	for _, params := range []string{sample, "", "bm.node=n1\n", strings.Repeat("y", MaxParams)} {
		img, err := ParamsImage(strings.TrimSpace(params))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(img)
	}
	good, _ := ParamsImage("bm.node=n1 bm.password=p")
	f.Add(good[:len(good)-SectorSize+5]) // the file cut off
	f.Add(good[:rootSector*SectorSize])  // no root directory
	bad := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(bad[pvdSector*SectorSize+156+10:], maxRootDir+1)
	binary.BigEndian.PutUint32(bad[pvdSector*SectorSize+156+14:], maxRootDir+1)
	f.Add(bad)
	f.Add(make([]byte, 20*SectorSize))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		r := &boundedReader{t: t, data: data, size: int64(len(data))}
		text, err := ReadParams(r, int64(len(data)))
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
		img, err := ParamsImage(text)
		if err != nil {
			t.Fatalf("accepted text %q is refused by ParamsImage: %v", text, err)
		}
		back, err := ReadParams(bytes.NewReader(img), int64(len(img)))
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
