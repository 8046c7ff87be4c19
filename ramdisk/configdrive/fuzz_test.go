package configdrive

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"testing"
)

// sparseDisk is a disk in memory that holds only the sectors written,
// failing reads and writes outside its size.
type sparseDisk struct {
	size    int64
	sectors map[int64][]byte
}

func (d *sparseDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > d.size {
		return 0, io.EOF
	}
	for i := range p {
		s := d.sectors[(off+int64(i))/512]
		if s == nil {
			p[i] = 0
		} else {
			p[i] = s[(off+int64(i))%512]
		}
	}
	return len(p), nil
}

func (d *sparseDisk) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > d.size {
		return 0, io.ErrShortWrite
	}
	for i, b := range p {
		n := (off + int64(i)) / 512
		s := d.sectors[n]
		if s == nil {
			if b == 0 {
				continue
			}
			s = make([]byte, 512)
			d.sectors[n] = s
		}
		s[(off+int64(i))%512] = b
	}
	return len(p), nil
}

// FuzzPlace feeds arbitrary first sectors (MBR, GPT header and entries,
// as an image written by anybody may have them) to the placement: it
// must never panic nor touch the disk outside its size, and a placement
// it reports lies within the disk.
func FuzzPlace(f *testing.F) {
	// Seeds: a valid GPT with one partition, an MBR, nothing.
	gpt := make([]byte, 34*512)
	gpt[510], gpt[511] = 0x55, 0xAA
	gpt[446+4] = 0xEE
	h := gpt[512:]
	copy(h, "EFI PART")
	binary.LittleEndian.PutUint32(h[8:], 0x10000)
	binary.LittleEndian.PutUint32(h[12:], 92)
	binary.LittleEndian.PutUint64(h[24:], 1)
	binary.LittleEndian.PutUint64(h[32:], 16383)
	binary.LittleEndian.PutUint64(h[40:], 34)
	binary.LittleEndian.PutUint64(h[48:], 16350)
	binary.LittleEndian.PutUint64(h[72:], 2)
	binary.LittleEndian.PutUint32(h[80:], 128)
	binary.LittleEndian.PutUint32(h[84:], 128)
	e := gpt[1024:]
	copy(e, linuxFSType[:])
	binary.LittleEndian.PutUint64(e[32:], 2048)
	binary.LittleEndian.PutUint64(e[40:], 10239)
	binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(gpt[1024:1024+128*128]))
	f.Add(gpt, int64(200<<20))
	mbr := make([]byte, 512)
	mbr[510], mbr[511] = 0x55, 0xAA
	mbr[446+4] = 0x83
	binary.LittleEndian.PutUint32(mbr[446+8:], 2048)
	binary.LittleEndian.PutUint32(mbr[446+12:], 8192)
	f.Add(mbr, int64(100<<20))
	f.Add([]byte{}, int64(1<<20))
	img := make([]byte, 4096)
	copy(img[0:], "config drive")
	f.Fuzz(func(t *testing.T, head []byte, size int64) {
		if size < 1024 || size > 1<<40 || len(head) > 64<<10 {
			return
		}
		size = size / 512 * 512
		d := &sparseDisk{size: size, sectors: map[int64][]byte{}}
		if int64(len(head)) > size {
			head = head[:size]
		}
		d.WriteAt(head, 0)
		dio := &diskIO{f: d, ss: 512, sectors: size / 512}
		res, err := dio.place(img)
		if err != nil {
			return
		}
		if res.Offset < 512 || res.Offset+int64(len(img)) > size || (res.Created && res.Offset+res.Size > size) {
			t.Fatalf("placement %+v outside a disk of %d bytes", res, size)
		}
	})
}
