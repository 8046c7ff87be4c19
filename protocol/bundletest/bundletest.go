// Package bundletest makes bundles exactly as they are given, for the
// tests of what a receiver refuses: protocol.EncodeBundle will not make a
// bundle with a foreign topic, a newer format or an oversize message.
package bundletest

import (
	"bytes"
	"compress/flate"
	"encoding/binary"

	"github.com/bmedge/bmedge/protocol"
)

// Record is one record as the bundle format spells it: the topic below
// the site and the payload, each after its length.
func Record(topic string, payload []byte) []byte {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(topic)))
	b = append(b, topic...)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// Raw is a bundle of format version holding records, compressed with the
// protocol's dictionary and checked for nothing.
func Raw(version byte, records ...[]byte) []byte {
	var out bytes.Buffer
	out.Write([]byte{protocol.BundleMagic[0], version})
	w, _ := flate.NewWriterDict(&out, flate.BestCompression, []byte(protocol.BundleDictionary))
	for _, r := range records {
		w.Write(r)
	}
	w.Close()
	return out.Bytes()
}
