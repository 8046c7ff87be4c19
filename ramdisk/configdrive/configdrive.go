// Package configdrive writes a config drive onto a disk after write_image
// has written the instance image, as ironic-python-agent's
// create_config_drive_partition does:
//
//   - into the image's own partition whose file system is labelled
//     config-2, when it has one;
//   - else into a new partition at the end of the disk: the last 64 MiB
//     (GPT: after moving the image's backup GPT to the end of the disk,
//     as sgdisk -e does; MBR: a fifth primary partition is impossible, and
//     a disk over 2 TiB gets it below the 2 TiB limit);
//   - else it fails, saying why (no partition table, no free entry, the
//     end of the disk taken by a partition of the image).
//
// The config drive comes as Ironic hands it to the ramdisk: a gzipped,
// base64-encoded image, or an http(s) URL of one (or of a raw image). It
// is decompressed in memory, at most MaxImageBytes. Nothing here logs it.
package configdrive

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/bmedge/bmedge/lib/fetchwords"
)

const (
	// Label is the file system label cloud-init looks for.
	Label = "config-2"
	// MaxImageBytes bounds the decompressed config drive (IPA's
	// MAX_CONFIG_DRIVE_SIZE_MB) and is the size of a partition made
	// for it.
	MaxImageBytes = 64 << 20
	// maxDownload bounds a config drive download: the base64 text of a
	// gzipped image of at most MaxImageBytes.
	maxDownload = MaxImageBytes/3*4 + 64<<10
	// mbrLimit is the last sector an MBR partition can reach.
	mbrLimit = 1<<32 - 1
)

// Linux filesystem data, as sgdisk's default type 8300 (GPT GUIDs are
// stored with their first three fields little-endian).
var linuxFSType = guid("0FC63DAF-8483-4772-8E79-3D69D8477DE4")

func guid(s string) [16]byte {
	var g [16]byte
	h := strings.ReplaceAll(s, "-", "")
	var raw [16]byte
	for i := 0; i < 16; i++ {
		fmt.Sscanf(h[2*i:2*i+2], "%02x", &raw[i])
	}
	binary.LittleEndian.PutUint32(g[0:4], binary.BigEndian.Uint32(raw[0:4]))
	binary.LittleEndian.PutUint16(g[4:6], binary.BigEndian.Uint16(raw[4:6]))
	binary.LittleEndian.PutUint16(g[6:8], binary.BigEndian.Uint16(raw[6:8]))
	copy(g[8:], raw[8:])
	return g
}

// Options tune Image.
type Options struct {
	// HTTPClient fetches a URL config drive; nil: one with timeouts.
	HTTPClient *http.Client
}

// Image returns the config drive image that value (write_image's
// configdrive argument) stands for.
func Image(ctx context.Context, value string, opts Options) ([]byte, error) {
	data := []byte(value)
	lower := strings.ToLower(value)
	if strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") {
		var err error
		if data, err = download(ctx, value, opts); err != nil {
			return nil, err
		}
	}
	compact := bytes.Join(bytes.Fields(data), nil)
	gz := make([]byte, base64.StdEncoding.DecodedLen(len(compact)))
	n, err := base64.StdEncoding.Decode(gz, compact)
	if err != nil {
		if len(data) > MaxImageBytes {
			return nil, fmt.Errorf("the config drive is %d bytes, more than the %d MiB limit", len(data), MaxImageBytes>>20)
		}
		// As IPA: what is not base64 is taken as the image itself.
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz[:n]))
	if err != nil {
		return nil, fmt.Errorf("the config drive is base64 but not gzip data (%v); give a gzipped and base64-encoded ISO 9660 or VFAT image", err)
	}
	img, err := io.ReadAll(io.LimitReader(zr, MaxImageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("the config drive's gzip data is damaged: %v", err)
	}
	if len(img) > MaxImageBytes {
		return nil, fmt.Errorf("the config drive is larger than the %d MiB limit once decompressed", MaxImageBytes>>20)
	}
	return img, nil
}

// Redact names a URL without its query string and user info.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	p.User, p.RawQuery = nil, ""
	return p.String()
}

func download(ctx context.Context, u string, opts Options) ([]byte, error) {
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
		}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("invalid config drive URL %s: %v", Redact(u), err)
	}
	resp, err := client.Do(req)
	if err != nil {
		// In words: the error's text names the addresses dialled.
		return nil, fmt.Errorf("cannot download the config drive from %s: %s; check the URL and that its server is reachable from the node's network", Redact(u), fetchwords.Cause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The site cache's reason, or the status in words: never
		// another server's status line or body (docs/security.md).
		b, _ := io.ReadAll(io.LimitReader(resp.Body, fetchwords.MaxReasonBytes))
		return nil, fmt.Errorf("%s; check the node's instance_info configdrive", fetchwords.Answer(resp.StatusCode, b, "config drive", Redact(u)))
	}
	if resp.ContentLength > maxDownload {
		return nil, fmt.Errorf("the config drive at %s is %d bytes, more than the %d MiB limit allows", Redact(u), resp.ContentLength, MaxImageBytes>>20)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDownload+1))
	if err != nil {
		return nil, fmt.Errorf("config drive download from %s was cut: %v", Redact(u), err)
	}
	if len(b) > maxDownload {
		return nil, fmt.Errorf("the config drive at %s is more than %d bytes, more than the %d MiB limit allows", Redact(u), maxDownload, MaxImageBytes>>20)
	}
	return b, nil
}

// Result says where the config drive went.
type Result struct {
	// Partition is the partition's number (1-based) in the table.
	Partition int `json:"partition"`
	// Table is "gpt" or "mbr".
	Table string `json:"table"`
	// Created is true for a partition made for it, false for the
	// image's own config-2 partition.
	Created bool `json:"created"`
	// Offset and Size locate the partition on the disk, in bytes.
	Offset int64 `json:"offset_bytes"`
	Size   int64 `json:"size_bytes"`
	// Written is the config drive's size.
	Written int `json:"written_bytes"`
}

// String describes r for the node's history.
func (r Result) String() string {
	how := "into the image's config-2 partition"
	if r.Created {
		how = "into a new partition at the end of the disk"
	}
	return fmt.Sprintf("config drive (%d bytes) written %s %d (%s, %d MiB at %d MiB)", r.Written, how, r.Partition, r.Table, r.Size>>20, r.Offset>>20)
}

type part struct {
	index       int // 0-based slot
	first, last int64
}

// Write puts img on the disk at path (a whole-disk device or an image
// file) whose logical sector size is sectorSize (0: 512).
func Write(path string, sectorSize int, img []byte) (Result, error) {
	if sectorSize <= 0 {
		sectorSize = 512
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return Result{}, fmt.Errorf("cannot open %s to write the config drive: %v", path, err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return Result{}, fmt.Errorf("cannot tell the size of %s: %v", path, err)
	}
	d := &diskIO{f: f, ss: int64(sectorSize), sectors: size / int64(sectorSize)}
	res, err := d.place(img)
	if err != nil {
		return Result{}, err
	}
	if err := f.Sync(); err != nil {
		return Result{}, fmt.Errorf("cannot flush the config drive to %s: %v", path, err)
	}
	res.Written = len(img)
	return res, nil
}

// readWriterAt is the disk: a device or file, or memory in tests.
type readWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

type diskIO struct {
	f       readWriterAt
	ss      int64
	sectors int64
}

func (d *diskIO) read(lba, n int64) ([]byte, error) {
	b := make([]byte, n*d.ss)
	if _, err := d.f.ReadAt(b, lba*d.ss); err != nil {
		return nil, fmt.Errorf("cannot read sector %d of the disk: %v", lba, err)
	}
	return b, nil
}

func (d *diskIO) write(lba int64, b []byte) error {
	if _, err := d.f.WriteAt(b, lba*d.ss); err != nil {
		return fmt.Errorf("cannot write sector %d of the disk: %v", lba, err)
	}
	return nil
}

// label reads the file system label at a partition's start: ISO 9660's
// volume identifier or a FAT boot sector's volume label.
func (d *diskIO) label(p part) string {
	off := p.first * d.ss
	length := (p.last - p.first + 1) * d.ss
	b := make([]byte, 512)
	if length >= 0x8000+512 {
		if _, err := d.f.ReadAt(b, off+0x8000); err == nil && b[0] == 1 && string(b[1:6]) == "CD001" {
			return strings.TrimRight(string(b[40:72]), " \x00")
		}
	}
	if _, err := d.f.ReadAt(b, off); err != nil || b[510] != 0x55 || b[511] != 0xAA {
		return ""
	}
	if string(b[0x52:0x57]) == "FAT32" {
		return strings.TrimRight(string(b[0x47:0x52]), " \x00")
	}
	if string(b[0x36:0x39]) == "FAT" {
		return strings.TrimRight(string(b[0x2B:0x36]), " \x00")
	}
	return ""
}

func (d *diskIO) place(img []byte) (Result, error) {
	hdr, err := d.read(1, 1)
	if err != nil {
		return Result{}, err
	}
	mbr, err := d.read(0, 1)
	if err != nil {
		return Result{}, err
	}
	if string(hdr[:8]) == "EFI PART" {
		return d.gpt(img, hdr)
	}
	if mbr[510] == 0x55 && mbr[511] == 0xAA {
		return d.mbr(img, mbr)
	}
	return Result{}, errors.New("the disk has no partition table (neither GPT nor MBR) after the image was written, so there is no place for the config drive: deploy a whole-disk image with a partition table, or deploy without a config drive")
}

// existing writes img into the config-2 partition among parts, if any.
func (d *diskIO) existing(img []byte, parts []part, table string) (Result, bool, error) {
	for _, p := range parts {
		if !strings.EqualFold(d.label(p), Label) {
			continue
		}
		size := (p.last - p.first + 1) * d.ss
		if int64(len(img)) > size {
			return Result{}, true, fmt.Errorf("the image's config-2 partition %d is %d bytes, too small for the %d-byte config drive", p.index+1, size, len(img))
		}
		if err := d.write(p.first, img); err != nil {
			return Result{}, true, err
		}
		return Result{Partition: p.index + 1, Table: table, Offset: p.first * d.ss, Size: size}, true, nil
	}
	return Result{}, false, nil
}

// span is the new partition's sectors: the last MaxImageBytes before
// end (inclusive), its start aligned down to 1 MiB.
func (d *diskIO) span(end int64) (first int64) {
	align := (1 << 20) / d.ss
	first = end + 1 - MaxImageBytes/d.ss
	return first / align * align
}

func overlapErr(p part, first int64, ss int64) error {
	return fmt.Errorf("there is no room for a config drive partition: the last %d MiB of the disk (from byte %d) overlap partition %d of the image; give the image a partition labelled config-2 (ISO 9660 or VFAT) or leave the end of the disk free", MaxImageBytes>>20, first*ss, p.index+1)
}

const (
	gptEntriesBytes = 128 * 128
)

func (d *diskIO) gpt(img []byte, hdr []byte) (Result, error) {
	le := binary.LittleEndian
	hsize := le.Uint32(hdr[12:16])
	if hsize < 92 || int64(hsize) > d.ss {
		return Result{}, fmt.Errorf("the image's GPT header has a bad size %d", hsize)
	}
	entLBA := int64(le.Uint64(hdr[72:80]))
	num := int64(le.Uint32(hdr[80:84]))
	esz := int64(le.Uint32(hdr[84:88]))
	if esz < 128 || esz > 4096 || num < 1 || num > 1024 || entLBA < 2 {
		return Result{}, fmt.Errorf("the image's GPT has a partition array this ramdisk cannot handle (%d entries of %d bytes at sector %d)", num, esz, entLBA)
	}
	entSectors := (num*esz + d.ss - 1) / d.ss
	ents, err := d.read(entLBA, entSectors)
	if err != nil {
		return Result{}, err
	}
	var parts []part
	free := -1
	for i := int64(0); i < num; i++ {
		e := ents[i*esz : (i+1)*esz]
		if bytes.Equal(e[0:16], make([]byte, 16)) {
			if free < 0 {
				free = int(i)
			}
			continue
		}
		parts = append(parts, part{index: int(i), first: int64(le.Uint64(e[32:40])), last: int64(le.Uint64(e[40:48]))})
	}
	if r, found, err := d.existing(img, parts, "gpt"); found || err != nil {
		return r, err
	}
	if free < 0 {
		return Result{}, fmt.Errorf("the image's GPT has no free entry (all %d used) for a config drive partition", num)
	}
	// Move the backup GPT to the end of the disk (sgdisk -e).
	backupLBA := d.sectors - 1
	backupEnt := backupLBA - entSectors
	lastUsable := backupEnt - 1
	first := d.span(lastUsable)
	for _, p := range parts {
		if p.last >= first {
			return Result{}, overlapErr(p, first, d.ss)
		}
	}
	if first <= entLBA+entSectors {
		return Result{}, fmt.Errorf("the disk (%d bytes) is too small for a %d MiB config drive partition", d.sectors*d.ss, MaxImageBytes>>20)
	}
	e := ents[int64(free)*esz : int64(free+1)*esz]
	copy(e[0:16], linuxFSType[:])
	if _, err := rand.Read(e[16:32]); err != nil {
		return Result{}, err
	}
	e[16+7] = e[16+7]&0x0f | 0x40 // version 4 (the time_hi field, little-endian)
	e[16+8] = e[16+8]&0x3f | 0x80
	le.PutUint64(e[32:40], uint64(first))
	le.PutUint64(e[40:48], uint64(lastUsable))
	le.PutUint64(e[48:56], 0)
	name := utf16.Encode([]rune(Label))
	for i := range 36 {
		var c uint16
		if i < len(name) {
			c = name[i]
		}
		le.PutUint16(e[56+2*i:], c)
	}
	entCRC := crc32.ChecksumIEEE(ents[:num*esz])

	oldBackup := int64(le.Uint64(hdr[32:40]))
	prim := append([]byte(nil), hdr...)
	le.PutUint64(prim[32:40], uint64(backupLBA))
	le.PutUint64(prim[48:56], uint64(lastUsable))
	le.PutUint32(prim[88:92], entCRC)
	setCRC(prim, hsize)
	back := append([]byte(nil), prim...)
	le.PutUint64(back[24:32], uint64(backupLBA))
	le.PutUint64(back[32:40], 1)
	le.PutUint64(back[72:80], uint64(backupEnt))
	setCRC(back, hsize)

	if oldBackup > 1 && oldBackup < backupLBA {
		// The image's own backup header, now stale, must not be taken
		// for a second GPT by a tool: wipe it (before the config drive
		// goes in, which may cover it).
		if err := d.write(oldBackup, make([]byte, d.ss)); err != nil {
			return Result{}, err
		}
	}
	if err := d.write(first, img); err != nil {
		return Result{}, err
	}
	// Zero the partition's first sectors past the image: a stale
	// signature there must not be taken for a file system.
	if pad := (int64(len(img))+d.ss-1)/d.ss*d.ss - int64(len(img)); pad > 0 {
		if _, err := d.f.WriteAt(make([]byte, pad), first*d.ss+int64(len(img))); err != nil {
			return Result{}, err
		}
	}
	for _, w := range []struct {
		lba int64
		b   []byte
	}{{entLBA, ents}, {backupEnt, ents}, {backupLBA, back}, {1, prim}} {
		if err := d.write(w.lba, w.b); err != nil {
			return Result{}, err
		}
	}
	// The protective MBR covers the whole disk.
	mbr, err := d.read(0, 1)
	if err != nil {
		return Result{}, err
	}
	if mbr[446+4] == 0xEE {
		le.PutUint32(mbr[446+12:], uint32(min(d.sectors-1, mbrLimit)))
		if err := d.write(0, mbr); err != nil {
			return Result{}, err
		}
	}
	return Result{Partition: free + 1, Table: "gpt", Created: true, Offset: first * d.ss, Size: (lastUsable - first + 1) * d.ss}, nil
}

func setCRC(h []byte, hsize uint32) {
	binary.LittleEndian.PutUint32(h[16:20], 0)
	binary.LittleEndian.PutUint32(h[16:20], crc32.ChecksumIEEE(h[:hsize]))
}

func (d *diskIO) mbr(img []byte, mbr []byte) (Result, error) {
	le := binary.LittleEndian
	var parts []part
	free := -1
	for i := 0; i < 4; i++ {
		e := mbr[446+16*i : 446+16*(i+1)]
		if e[4] == 0 {
			if free < 0 {
				free = i
			}
			continue
		}
		first := int64(le.Uint32(e[8:12]))
		n := int64(le.Uint32(e[12:16]))
		parts = append(parts, part{index: i, first: first, last: first + n - 1})
	}
	if r, found, err := d.existing(img, parts, "mbr"); found || err != nil {
		return r, err
	}
	if free < 0 {
		// IPA's refusal (logical partitions are not used).
		return Result{}, errors.New("the config drive cannot be created: the disk uses MBR partitioning and already has 4 primary partitions")
	}
	end := min(d.sectors-1, mbrLimit-1)
	first := d.span(end)
	for _, p := range parts {
		if p.last >= first {
			return Result{}, overlapErr(p, first, d.ss)
		}
	}
	if first < 1 {
		return Result{}, fmt.Errorf("the disk (%d bytes) is too small for a %d MiB config drive partition", d.sectors*d.ss, MaxImageBytes>>20)
	}
	if err := d.write(first, img); err != nil {
		return Result{}, err
	}
	if pad := (int64(len(img))+d.ss-1)/d.ss*d.ss - int64(len(img)); pad > 0 {
		if _, err := d.f.WriteAt(make([]byte, pad), first*d.ss+int64(len(img))); err != nil {
			return Result{}, err
		}
	}
	e := mbr[446+16*free : 446+16*(free+1)]
	e[0] = 0
	copy(e[1:4], []byte{0xFE, 0xFF, 0xFF}) // CHS: beyond reach, use LBA
	e[4] = 0x0C                            // FAT32 (LBA), as parted's mkpart fat32
	copy(e[5:8], []byte{0xFE, 0xFF, 0xFF})
	le.PutUint32(e[8:12], uint32(first))
	le.PutUint32(e[12:16], uint32(end-first+1))
	if err := d.write(0, mbr); err != nil {
		return Result{}, err
	}
	return Result{Partition: free + 1, Table: "mbr", Created: true, Offset: first * d.ss, Size: (end - first + 1) * d.ss}, nil
}
