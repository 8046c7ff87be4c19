package reach

import (
	"testing"
	"time"
)

// A record is made on first use and viewed as the API shows it (since
// when unreachable only while offline); the broker's copies follow what
// the presence said, an offline presence keeping the site broker; a
// request to bring a site back online is asked once at a time.
func TestBook(t *testing.T) {
	b := New(time.Minute)
	if l, o, q, qa := b.View("s1", false); l != nil || o != nil || q != 0 || qa != nil {
		t.Fatal("a view of an unknown site")
	}
	t0 := time.Unix(1000, 0)
	r := b.Site("s1")
	r.LastSeen, r.OfflineSince, r.Queued, r.QueuedAt = t0, t0, 3, t0
	if l, o, q, _ := b.View("s1", false); !l.Equal(t0) || o == nil || !o.Equal(t0) || q != 3 {
		t.Fatal("offline view")
	}
	if _, o, _, _ := b.View("s1", true); o != nil {
		t.Fatal("an online site shown unreachable")
	}
	b.NoteSiteBroker("s1", true, true)
	b.NoteSiteBroker("s1", false, false)
	if !b.RunsSiteBroker("s1") {
		t.Fatal("an offline presence dropped the site broker")
	}
	b.NoteSiteBroker("s1", true, false)
	if b.RunsSiteBroker("s1") {
		t.Fatal("site broker kept after an online presence without it")
	}
	if !b.Mark("s1") || b.Mark("s1") {
		t.Fatal("marking asked twice")
	}
	b.Unmark("s1")
	if !b.Mark("s1") {
		t.Fatal("unmarked site not asked again")
	}
	b.SetUp("s1", true)
	if !b.Up("s1") || b.Up("s2") {
		t.Fatal("up")
	}
	b.Delete("s1")
	if b.Lookup("s1") != nil {
		t.Fatal("deleted record kept")
	}
}
