package outbox

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestInMemoryStoreKeepsLargeValues: an outbox without a state folder (in
// memory) keeps records and keyed values of any size up to a message's
// limit, as the one in a state folder does: an in-memory Badger refuses
// values over its threshold, so the large ones sit beside it. Overwrites
// and deletions move a value between the two, and Load returns records by
// sequence number whatever their sizes.
func TestInMemoryStoreKeepsLargeValues(t *testing.T) {
	s, err := OpenStore("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := bytes.Repeat([]byte("i"), protocol.MaxMessageBytes-1024) // an inventory result near the limit
	small := []byte("small")
	now := time.Now().UTC()
	for seq, p := range map[uint64][]byte{1: small, 2: big, 3: small, 4: big} {
		if err := s.Put(seq, &Record{ID: "r", Topic: "t", Payload: p, At: now}); err != nil {
			t.Fatalf("Put %d (%d bytes): %v", seq, len(p), err)
		}
	}
	seqs, recs, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 4 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 || seqs[3] != 4 {
		t.Fatalf("Load: seqs %v, want 1 2 3 4", seqs)
	}
	if !bytes.Equal(recs[1].Payload, big) || !bytes.Equal(recs[2].Payload, small) {
		t.Fatal("Load: a payload changed")
	}
	// Record 2 acked (its payload dropped, small now), record 4 deleted,
	// record 3 grows.
	if err := s.Put(2, &Record{ID: "r", Topic: "t", At: now, Acked: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(3, &Record{ID: "r", Topic: "t", Payload: big, At: now}); err != nil {
		t.Fatal(err)
	}
	s.Later(4, nil)
	if err := s.Put(5, &Record{ID: "r", Topic: "t", Payload: small, At: now}); err != nil { // waits for the Later before it
		t.Fatal(err)
	}
	seqs, recs, _ = s.Load()
	if len(seqs) != 4 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 || seqs[3] != 5 {
		t.Fatalf("Load after the changes: seqs %v, want 1 2 3 5", seqs)
	}
	if recs[1].Payload != nil || recs[1].Acked.IsZero() || !bytes.Equal(recs[2].Payload, big) {
		t.Fatalf("Load after the changes: record 2 %d bytes acked %v, record 3 %d bytes", len(recs[1].Payload), recs[1].Acked, len(recs[2].Payload))
	}
	// A keyed value (a console's kept output) large, then small, then gone.
	s.PutConsole("n1", big)
	s.PutCred("n2", bytes.Repeat([]byte{1}, 32)) // waits for what was queued before it
	if c, _ := s.LoadConsoles(); !bytes.Equal(c["n1"], big) {
		t.Fatalf("LoadConsoles: %d bytes, want %d", len(c["n1"]), len(big))
	}
	s.PutConsole("n1", small)
	s.PutCred("n2", bytes.Repeat([]byte{2}, 32))
	if c, _ := s.LoadConsoles(); !bytes.Equal(c["n1"], small) {
		t.Fatalf("LoadConsoles after a small value: %q", c["n1"])
	}
	s.PutConsole("n1", big)
	s.PutConsole("n1", nil)
	s.PutCred("n2", bytes.Repeat([]byte{3}, 32))
	if c, _ := s.LoadConsoles(); len(c) != 0 {
		t.Fatalf("LoadConsoles after the deletion: %d values", len(c))
	}
}
