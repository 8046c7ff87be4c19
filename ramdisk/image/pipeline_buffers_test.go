package image

import (
	"testing"
	"unsafe"

	"github.com/bmedge/bmedge/ramdisk/disk"
)

// The pipeline's buffers are separate, full-capacity-limited slices fit
// for O_DIRECT, carved from a region that starts on a huge-page boundary
// (so that huge pages can back it), and each keeps what is written to it.
func TestPipelineBuffers(t *testing.T) {
	for _, tc := range []struct{ n, size int }{
		{4, DefaultBufferBytes},
		{2, 3 * disk.DirectAlign},
		{3, hugePage + disk.DirectAlign},
	} {
		bufs, free := pipelineBuffers(tc.n, tc.size)
		if len(bufs) != tc.n {
			t.Fatalf("%d×%d: got %d buffers", tc.n, tc.size, len(bufs))
		}
		if a := uintptr(unsafe.Pointer(&bufs[0][0])); a%hugePage != 0 {
			t.Errorf("%d×%d: first buffer at %#x, not on a %d-byte boundary", tc.n, tc.size, a, hugePage)
		}
		for i, b := range bufs {
			if len(b) != tc.size || cap(b) != tc.size {
				t.Errorf("%d×%d: buffer %d has len %d cap %d", tc.n, tc.size, i, len(b), cap(b))
			}
			if a := uintptr(unsafe.Pointer(&b[0])); a%disk.DirectAlign != 0 {
				t.Errorf("%d×%d: buffer %d at %#x is not aligned for O_DIRECT", tc.n, tc.size, i, a)
			}
			for j := range b {
				b[j] = byte(i + 1)
			}
		}
		for i, b := range bufs {
			for j, c := range b {
				if c != byte(i+1) {
					t.Fatalf("%d×%d: buffer %d byte %d is %d: buffers overlap", tc.n, tc.size, i, j, c)
				}
			}
		}
		free()
	}
}
