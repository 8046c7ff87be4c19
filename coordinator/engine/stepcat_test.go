package engine

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/drivers"
)

// offered is a ramdisk's hello lists, made anew on each call as the fsm
// makes them from each hello.
func offered() ([]drivers.Step, []drivers.Step) {
	return []drivers.Step{
			{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true, RequiresRamdisk: true},
			{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true, RequiresRamdisk: true},
		}, []drivers.Step{
			{Interface: "deploy", Step: "write_image", Priority: 80, RequiresRamdisk: true},
		}
}

func scanKeys(t *testing.T, e *Engine, prefix string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	if err := e.st.Scan(prefix, func(k string, v []byte) error { out[k] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStepListsStoredOnce: nodes whose ramdisks offered the same steps
// refer to one stored copy, share it in memory, and get it back after a
// restart; a record with inline lists (written before) still loads, and
// a copy no node refers to is dropped at start.
func TestStepListsStoredOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir}
	e := startedIn(t, dir)
	ids := createFake(t, e, "a", "b", "c")
	a, b, c := struct{ UUID string }{ids[0]}, struct{ UUID string }{ids[1]}, struct{ UUID string }{ids[2]}
	for _, id := range []string{a.UUID, b.UUID} {
		if err := e.do(func(t *tx) error {
			n := e.reg.nodes[id]
			n.CachedCleanSteps, n.CachedDeploySteps = offered()
			t.dirty[n.UUID] = n
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	cats := scanKeys(t, e, store.StepCatalogPrefix)
	if len(cats) != 1 {
		t.Fatalf("%d stored step lists for two nodes offering the same steps, want 1", len(cats))
	}
	recs := scanKeys(t, e, store.NodePrefix)
	for _, id := range []string{a.UUID, b.UUID} {
		r := string(recs[store.NodePrefix+id])
		if strings.Contains(r, "cached_clean_steps") || strings.Contains(r, "erase_devices") || !strings.Contains(r, `"steps_ref":"`) {
			t.Fatalf("node record carries its step lists instead of a reference: %s", r)
		}
	}
	if strings.Contains(string(recs[store.NodePrefix+c.UUID]), "steps_ref") {
		t.Fatal("a node without step lists got a reference")
	}
	if unsafe.SliceData(e.reg.nodes[a.UUID].CachedCleanSteps) != unsafe.SliceData(e.reg.nodes[b.UUID].CachedCleanSteps) {
		t.Fatal("equal step lists of two nodes are not shared in memory")
	}
	// A clone (PATCH, UpdateNode) shares them too and keeps them.
	if cl := clone(e.reg.nodes[a.UUID]); !reflect.DeepEqual(cl.CachedCleanSteps, e.reg.nodes[a.UUID].CachedCleanSteps) {
		t.Fatal("clone lost the step lists")
	}

	// An older record with inline lists, and a stored copy nobody uses.
	old := *e.reg.nodes[c.UUID]
	old.CachedCleanSteps, old.CachedDeploySteps = offered()
	old.CachedCleanSteps = old.CachedCleanSteps[:1]
	inline, _ := json.Marshal(&old)
	var batch store.Batch
	batch.Set(store.NodePrefix+c.UUID, inline)
	batch.Set(store.StepCatalogPrefix+"00000000000000000000000000000000", []byte(`{"clean":[{"interface":"deploy","step":"x"}]}`))
	e.Close()
	writeOffline(t, dir, &batch)

	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	wantClean, wantDeploy := offered()
	for _, id := range []string{a.UUID, b.UUID} {
		n := e2.reg.nodes[id]
		if !reflect.DeepEqual(n.CachedCleanSteps, wantClean) || !reflect.DeepEqual(n.CachedDeploySteps, wantDeploy) {
			t.Fatalf("after restart node %s has clean %v deploy %v, want %v %v", id, n.CachedCleanSteps, n.CachedDeploySteps, wantClean, wantDeploy)
		}
	}
	if n := e2.reg.nodes[c.UUID]; len(n.CachedCleanSteps) != 1 || n.CachedCleanSteps[0].Step != "erase_devices_metadata" || len(n.CachedDeploySteps) != 1 {
		t.Fatalf("record with inline lists loaded as clean %v deploy %v", n.CachedCleanSteps, n.CachedDeploySteps)
	}
	if got := scanKeys(t, e2, store.StepCatalogPrefix); len(got) != 1 {
		t.Fatalf("%d stored step lists after start, want the 1 in use (the unused one dropped): %v", len(got), got)
	}
}
