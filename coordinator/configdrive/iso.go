package configdrive

import (
	"encoding/binary"
	"fmt"
	"path"
	"sort"
	"strings"
)

// The ISO 9660 writer. A config drive is a handful of small files in two
// levels of folders, so the image is written by hand, not by a tool:
// 16 sectors of system area, the primary volume descriptor, the
// terminator, the two path tables, one sector per folder and the files.
// Names are ISO 9660 level 2 identifiers (upper case, digits and "_")
// with Rock Ridge (RRIP 1.09) NM and PX entries carrying the real names
// ("meta_data.json"), as genisoimage -r writes them; a reader without
// Rock Ridge (Linux with norock) maps the identifiers back to lower case.
// The bytes depend only on the files (fixed timestamps).

const sectorSize = 2048

var (
	le = binary.LittleEndian
	be = binary.BigEndian
	// 2000-01-01 00:00:00 UTC, the time every record shows.
	recDate = [7]byte{100, 1, 1, 0, 0, 0, 0}
	volDate = []byte("2000010100000000\x00")
	noDate  = []byte("0000000000000000\x00")
)

type isoNode struct {
	name     string // real (Rock Ridge) name
	id       string // ISO 9660 identifier
	data     []byte
	dir      bool
	children []*isoNode
	parent   *isoNode
	sector   int
	size     int
	number   int // path table number (folders)
}

// isoID turns a name into an ISO 9660 level 2 identifier: d-characters
// only, at most 30 characters (";1" is added for files).
func isoID(name string, dir bool) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(name) {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r == '.' && !dir:
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	s := b.String()
	if !dir {
		if !strings.Contains(s, ".") {
			s += "."
		}
		if i := strings.LastIndexByte(s, '.'); strings.Count(s, ".") > 1 {
			s = strings.ReplaceAll(s[:i], ".", "_") + s[i:]
		}
	}
	if len(s) > 30 {
		s = s[:30]
	}
	return s
}

// buildISO writes an ISO 9660 image with volume identifier label holding
// files (slash-separated paths to contents).
func buildISO(label string, files map[string][]byte) ([]byte, error) {
	root := &isoNode{dir: true}
	root.parent = root
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		parts := strings.Split(path.Clean(p), "/")
		cur := root
		for i, part := range parts {
			last := i == len(parts)-1
			var next *isoNode
			for _, c := range cur.children {
				if c.name == part {
					next = c
				}
			}
			if next == nil {
				next = &isoNode{name: part, id: isoID(part, !last), dir: !last, parent: cur}
				cur.children = append(cur.children, next)
			} else if next.dir == last {
				return nil, fmt.Errorf("config drive path %q is both a file and a folder", p)
			}
			if last {
				next.data = files[p]
			}
			cur = next
		}
	}
	// Folders breadth first: the path table's order.
	dirs := []*isoNode{root}
	for i := 0; i < len(dirs); i++ {
		d := dirs[i]
		d.number = i + 1
		sort.Slice(d.children, func(a, b int) bool { return d.children[a].id < d.children[b].id })
		for j := 1; j < len(d.children); j++ {
			if d.children[j].id == d.children[j-1].id {
				return nil, fmt.Errorf("config drive names %q and %q map to the same ISO 9660 name", d.children[j-1].name, d.children[j].name)
			}
		}
		for _, c := range d.children {
			if c.dir {
				dirs = append(dirs, c)
			}
		}
	}
	// Path table.
	var ptL, ptM []byte
	for _, d := range dirs {
		id := d.id
		if d == root {
			id = "\x00"
		}
		rec := make([]byte, 8+len(id)+len(id)%2)
		rec[0] = byte(len(id))
		copy(rec[8:], id)
		m := append([]byte(nil), rec...)
		le.PutUint16(rec[6:8], uint16(d.parent.number))
		be.PutUint16(m[6:8], uint16(d.parent.number))
		ptL, ptM = append(ptL, rec...), append(ptM, m...)
		// extents filled below
	}
	ptSectors := (len(ptL) + sectorSize - 1) / sectorSize
	next := 18 + 2*ptSectors
	for _, d := range dirs {
		d.sector, d.size = next, sectorSize
		next++
	}
	var walk func(d *isoNode)
	walk = func(d *isoNode) {
		for _, c := range d.children {
			if c.dir {
				walk(c)
				continue
			}
			c.sector, c.size = next, len(c.data)
			next += max(1, (len(c.data)+sectorSize-1)/sectorSize)
		}
	}
	walk(root)
	total := next
	img := make([]byte, total*sectorSize)
	sector := func(n int) []byte { return img[n*sectorSize : (n+1)*sectorSize] }

	// Path tables, now that the extents are known.
	off := 0
	for _, d := range dirs {
		le.PutUint32(ptL[off+2:], uint32(d.sector))
		be.PutUint32(ptM[off+2:], uint32(d.sector))
		off += 8 + int(ptL[off]) + int(ptL[off])%2
	}
	copy(img[18*sectorSize:], ptL)
	copy(img[(18+ptSectors)*sectorSize:], ptM)

	// Primary volume descriptor.
	p := sector(16)
	p[0] = 1
	copy(p[1:6], "CD001")
	p[6] = 1
	pad(p[8:40], "")
	pad(p[40:72], label)
	both32(p[80:88], uint32(total))
	both16(p[120:124], 1)
	both16(p[124:128], 1)
	both16(p[128:132], sectorSize)
	both32(p[132:140], uint32(len(ptL)))
	le.PutUint32(p[140:144], 18)
	be.PutUint32(p[148:152], uint32(18+ptSectors))
	dirRecord(p[156:190], root.sector, sectorSize, true, "\x00", nil)
	pad(p[190:318], "")
	pad(p[318:446], "BMEDGE CONFIGDRIVE")
	pad(p[446:574], "")
	pad(p[574:702], "BMEDGE CONFIGDRIVE")
	pad(p[702:813], "")
	copy(p[813:830], volDate)
	copy(p[830:847], volDate)
	copy(p[847:864], noDate)
	copy(p[864:881], noDate)
	p[881] = 1
	t := sector(17)
	t[0] = 255
	copy(t[1:6], "CD001")
	t[6] = 1

	// Folders.
	for _, d := range dirs {
		s := sector(d.sector)
		var su []byte
		if d == root {
			su = append(suSP(), suER()...)
		}
		su = append(su, suPX(true)...)
		o := dirRecord(s, d.sector, sectorSize, true, "\x00", su)
		o += dirRecord(s[o:], d.parent.sector, sectorSize, true, "\x01", suPX(true))
		for _, c := range d.children {
			id := c.id
			if !c.dir {
				id += ";1"
			}
			su := append(suPX(c.dir), suNM(c.name)...)
			need := recLen(id, su)
			if o+need > sectorSize {
				return nil, fmt.Errorf("config drive folder %q has too many entries for one sector", d.name)
			}
			o += dirRecord(s[o:], c.sector, uint32(c.size), c.dir, id, su)
		}
	}
	walk = func(d *isoNode) {
		for _, c := range d.children {
			if c.dir {
				walk(c)
			} else {
				copy(img[c.sector*sectorSize:], c.data)
			}
		}
	}
	walk(root)
	return img, nil
}

func recLen(id string, su []byte) int {
	n := 33 + len(id)
	if n%2 == 1 {
		n++
	}
	n += len(su)
	if n%2 == 1 {
		n++
	}
	return n
}

// dirRecord writes a directory record with system use su into b and
// returns its length.
func dirRecord(b []byte, extent int, size uint32, dir bool, id string, su []byte) int {
	n := recLen(id, su)
	b[0] = byte(n)
	both32(b[2:10], uint32(extent))
	both32(b[10:18], size)
	copy(b[18:25], recDate[:])
	if dir {
		b[25] = 2
	}
	both16(b[28:32], 1)
	b[32] = byte(len(id))
	copy(b[33:], id)
	o := 33 + len(id)
	if o%2 == 1 {
		o++
	}
	copy(b[o:], su)
	return n
}

// Rock Ridge / SUSP entries.
func suSP() []byte { return []byte{'S', 'P', 7, 1, 0xBE, 0xEF, 0} }

func suER() []byte {
	id, des, src := "RRIP_1991A", "ROCK RIDGE INTERCHANGE PROTOCOL 1.09", "IEEE P1282"
	b := []byte{'E', 'R', byte(8 + len(id) + len(des) + len(src)), 1, byte(len(id)), byte(len(des)), byte(len(src)), 1}
	return append(append(append(b, id...), des...), src...)
}

func suPX(dir bool) []byte {
	b := make([]byte, 36)
	copy(b, "PX")
	b[2], b[3] = 36, 1
	mode, links := uint32(0o100444), uint32(1)
	if dir {
		mode, links = 0o040555, 2
	}
	both32(b[4:12], mode)
	both32(b[12:20], links)
	return b // uid and gid 0
}

func suNM(name string) []byte {
	return append([]byte{'N', 'M', byte(5 + len(name)), 1, 0}, name...)
}

func pad(b []byte, s string) {
	for i := range b {
		b[i] = ' '
	}
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
