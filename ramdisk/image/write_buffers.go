package image

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bmedge/bmedge/ramdisk/disk"
)

// hugePage is the size of a transparent huge page with 4 KiB base pages
// (amd64, arm64).
const hugePage = 2 << 20

// pipelineBuffers returns n buffers of size bytes (a multiple of
// disk.DirectAlign) for the pipeline, and a function that frees them,
// to be called only once nothing uses them any more.
//
// They are carved from one anonymous mapping aligned to 2 MiB and advised
// MADV_HUGEPAGE, so that, where transparent huge pages are enabled (even
// only on request, as Debian's default "madvise"), 16 MiB of buffers take
// 8 TLB entries instead of 4096. With 4 KiB pages every pass over the
// buffers misses the TLB once a page in the kernel's copy from the
// socket, in the hash and in the O_DIRECT write's page pinning; under a
// hypervisor each miss walks two page tables. The hash, the pipeline's
// bound, is what gains (docs/benchmarks-ramdisk.md). Where the mapping
// cannot be made, or huge pages are off, the buffers work the same with
// 4 KiB pages.
func pipelineBuffers(n, size int) ([][]byte, func()) {
	bufs := make([][]byte, n)
	total := n * size
	m, err := unix.Mmap(-1, 0, total+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		for i := range bufs {
			bufs[i] = disk.AlignedBuffer(size)
		}
		return bufs, func() {}
	}
	off := 0
	if r := int(uintptr(unsafe.Pointer(&m[0])) % hugePage); r != 0 {
		off = hugePage - r
	}
	region := m[off : off+total : off+total]
	// Best-effort: without huge pages the buffers are still aligned
	// for O_DIRECT (the mapping is page-aligned).
	_ = unix.Madvise(region, unix.MADV_HUGEPAGE)
	for i := range bufs {
		bufs[i] = region[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs, func() { _ = unix.Munmap(m) }
}
