package raid

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"unicode/utf16"
)

// linuxRAIDType is the GPT partition type of a Linux RAID member.
const linuxRAIDType = "A19D880F-05FC-4D3B-A006-743F0F84911E"

// biosBootType is the GPT partition type of a BIOS boot partition (sgdisk
// type EF02), where GRUB for BIOS puts its core image on a GPT disk.
const biosBootType = "21686148-6449-6E6F-744E-656564454649"

// raidStart is where the first RAID partition starts: 8 MiB, leaving room
// for a BIOS boot partition as IPA does on GPT.
const raidStart = 8 << 20

// The BIOS boot partition, as IPA makes it on each software RAID holder
// in BIOS boot mode: 2 MiB from the first free (aligned) sector, 1 MiB,
// in the room left before the RAID partitions; its number follows theirs
// (the RAID partitions keep numbers 1..n, as IPA's) and its name is
// bios-boot-part-<holder index>.
const (
	biosBootStart = 1 << 20
	biosBootSize  = 2 << 20
)

// part is one partition to write, in bytes; Type "" is Linux RAID.
type part struct {
	Start, Size uint64
	Name        string
	Type        string
}

// biosBootPart is the BIOS boot partition of the holder at index i.
func biosBootPart(i int) part {
	return part{Start: biosBootStart, Size: biosBootSize, Name: fmt.Sprintf("bios-boot-part-%d", i), Type: biosBootType}
}

// guidBytes encodes a GUID string in GPT's mixed-endian layout.
func guidBytes(s string) [16]byte {
	var g [16]byte
	var hex []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			hex = append(hex, s[i])
		}
	}
	var raw [16]byte
	for i := 0; i < 16 && 2*i+1 < len(hex); i++ {
		fmt.Sscanf(string(hex[2*i:2*i+2]), "%02x", &raw[i])
	}
	// The first three fields are little-endian.
	g[0], g[1], g[2], g[3] = raw[3], raw[2], raw[1], raw[0]
	g[4], g[5] = raw[5], raw[4]
	g[6], g[7] = raw[7], raw[6]
	copy(g[8:], raw[8:])
	return g
}

func randomGUID() [16]byte {
	var g [16]byte
	_, _ = rand.Read(g[:])
	g[7] = g[7]&0x0f | 0x40 // version 4 (byte 7 holds the high byte of field 3)
	g[8] = g[8]&0x3f | 0x80
	return g
}

// layout places the logical disks' partitions on a disk of size bytes:
// fixed sizes first in order, the "MAX" one (size 0) last, taking the
// rest. It returns the partitions in the logical disks' order.
func layout(sizes []uint64, names []string, diskBytes, sector uint64) ([]part, error) {
	lastUsable := (diskBytes/sector - 34) * sector // bytes, exclusive end
	parts := make([]part, len(sizes))
	next := uint64(raidStart)
	maxIdx := -1
	for i, s := range sizes {
		if s == 0 {
			maxIdx = i
			continue
		}
		if next+s > lastUsable {
			return nil, fmt.Errorf("the logical disks do not fit: %d GiB needed from %d MiB on, the disk has %d bytes", s>>30, next>>20, diskBytes)
		}
		parts[i] = part{Start: next, Size: s, Name: names[i]}
		next += s
	}
	if maxIdx >= 0 {
		end := lastUsable &^ (1<<20 - 1) // whole MiB
		if end <= next+(1<<20) {
			return nil, fmt.Errorf("no space left for the \"MAX\" logical disk on a disk of %d bytes", diskBytes)
		}
		parts[maxIdx] = part{Start: next, Size: end - next, Name: names[maxIdx]}
	}
	return parts, nil
}

// writeGPT writes a new GPT (protective MBR, primary and backup headers
// and entries) with parts (of type Linux RAID unless they say) to f of
// diskBytes.
func writeGPT(f *os.File, diskBytes, sector uint64, parts []part) error {
	ss := sector
	last := diskBytes/ss - 1
	const nEntries, entSize = 128, 128
	entries := make([]byte, nEntries*entSize)
	for i, p := range parts {
		e := entries[i*entSize:]
		t := p.Type
		if t == "" {
			t = linuxRAIDType
		}
		typ := guidBytes(t)
		copy(e[0:16], typ[:])
		u := randomGUID()
		copy(e[16:32], u[:])
		binary.LittleEndian.PutUint64(e[32:], p.Start/ss)
		binary.LittleEndian.PutUint64(e[40:], (p.Start+p.Size)/ss-1)
		for j, r := range utf16.Encode([]rune(p.Name)) {
			if j >= 36 {
				break
			}
			binary.LittleEndian.PutUint16(e[56+2*j:], r)
		}
	}
	entCRC := crc32.ChecksumIEEE(entries)
	entSectors := uint64(nEntries*entSize) / ss
	diskGUID := randomGUID()
	header := func(cur, backup, entLBA uint64) []byte {
		h := make([]byte, ss)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:], 92)
		binary.LittleEndian.PutUint64(h[24:], cur)
		binary.LittleEndian.PutUint64(h[32:], backup)
		binary.LittleEndian.PutUint64(h[40:], 2+entSectors)
		binary.LittleEndian.PutUint64(h[48:], last-1-entSectors)
		copy(h[56:72], diskGUID[:])
		binary.LittleEndian.PutUint64(h[72:], entLBA)
		binary.LittleEndian.PutUint32(h[80:], nEntries)
		binary.LittleEndian.PutUint32(h[84:], entSize)
		binary.LittleEndian.PutUint32(h[88:], entCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
		return h
	}
	mbr := make([]byte, ss)
	pe := mbr[446:]
	pe[1], pe[2], pe[3] = 0x00, 0x02, 0x00
	pe[4] = 0xEE
	pe[5], pe[6], pe[7] = 0xFF, 0xFF, 0xFF
	binary.LittleEndian.PutUint32(pe[8:], 1)
	n := last
	if n > 0xFFFFFFFF {
		n = 0xFFFFFFFF
	}
	binary.LittleEndian.PutUint32(pe[12:], uint32(n))
	mbr[510], mbr[511] = 0x55, 0xAA
	writes := []struct {
		lba uint64
		b   []byte
	}{
		{0, mbr}, {1, header(1, last, 2)}, {2, entries},
		{last - entSectors, entries}, {last, header(last, 1, last-entSectors)},
	}
	for _, w := range writes {
		if _, err := f.WriteAt(w.b, int64(w.lba*ss)); err != nil {
			return fmt.Errorf("write partition table of %s: %w", f.Name(), err)
		}
	}
	return f.Sync()
}
