package media

import (
	"errors"
	"maps"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRefusalsPastTheQuotaDoNotWalkTheStore: a tenant at its object
// count, whose every upload is refused, does not make each refusal walk
// every tenant's objects under the store's one lock (which every other
// tenant's upload, download and re-host waits for): a refusal walks them
// only once one may have expired. Before, each refusal swept them all
// (200 took 6.9 s with 65,536 objects stored, against 75 ms with one).
// The walk is seen by a probe only a walk removes: an object planted as
// expired without telling the store when its sweep is due.
func TestRefusalsPastTheQuotaDoNotWalkTheStore(t *testing.T) {
	s, clk := newStore(t, Config{TTL: time.Hour})
	s.maxTenantObjects = 1
	if _, err := s.Put("t2", strings.NewReader("x"), "", ""); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.objects["probe"] = &object{Info: Info{ID: "probe", Tenant: "t1", Expires: clk.Now()}, committed: true}
	s.count["t1"]++
	s.mu.Unlock()
	for range 3 {
		if _, err := s.Put("t2", strings.NewReader("x"), "", ""); !errors.Is(err, ErrQuota) {
			t.Fatalf("t2 past its object count: err = %v, want ErrQuota", err)
		}
	}
	if s.Stats().Objects != 2 {
		t.Fatalf("objects after refusals with none due = %d, want 2: a refusal walked the store", s.Stats().Objects)
	}
	// Once t2's object expires, the refusal's sweep removes it (and the
	// probe), and the upload is let in.
	clk.Advance(time.Hour)
	if _, err := s.Put("t2", strings.NewReader("x"), "", ""); err != nil {
		t.Fatalf("t2's upload once its object expired: %v", err)
	}
	if s.Stats().Objects != 1 {
		t.Fatalf("objects after the due sweep = %d, want 1 (t2's new one)", s.Stats().Objects)
	}
}

// TestRegistryAppliesDoNotWalkTheStore: the registry applies a tenant's
// changes make every instance run (SetTenants, with the same tenants and
// no upload left orphan) do not walk every tenant's stored objects under
// the store's one lock. Before, each did (200 took 10 s with 65,536
// objects stored). The walk is seen by a probe only a walk removes: an
// upload marked orphan without the store's count of them.
func TestRegistryAppliesDoNotWalkTheStore(t *testing.T) {
	s, clk := newStore(t, Config{TTL: time.Hour})
	created := map[string]time.Time{"t1": time.Unix(1, 0), "t2": time.Unix(2, 0)}
	s.SetTenants(created)
	s.mu.Lock()
	s.objects["probe"] = &object{Info: Info{ID: "probe", Tenant: "t9", Expires: clk.Now().Add(time.Hour)}, committed: true, orphan: true}
	s.count["t9"]++
	s.mu.Unlock()
	s.SetTenants(maps.Clone(created)) // a map of its own, as the registry gives
	if s.Stats().Objects != 1 {
		t.Fatalf("objects after an apply of the same tenants = %d, want 1: the apply walked the store", s.Stats().Objects)
	}
	// A change of the tenants still walks them.
	s.SetTenants(map[string]time.Time{"t1": time.Unix(1, 0)})
	if s.Stats().Objects != 0 {
		t.Fatalf("objects after an apply that deleted t2 = %d, want 0", s.Stats().Objects)
	}
}

// TestRefusedBeginCreatesNoFile: a tenant at its object count is refused
// before any file is made for its object. Before, each refusal created a
// file and removed it, two disk operations per refused request. The probe
// is a directory that is gone: creating a file there fails, so a refusal
// that tried answers that failure, not ErrQuota.
func TestRefusedBeginCreatesNoFile(t *testing.T) {
	dir := t.TempDir()
	s, _ := newStore(t, Config{Dir: dir, TTL: time.Hour})
	s.maxTenantObjects = 1
	if _, err := s.Put("t1", strings.NewReader("x"), "", ""); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin("t1", "", ""); !errors.Is(err, ErrQuota) {
		t.Fatalf("t1 past its object count: err = %v, want ErrQuota and no file created", err)
	}
	if got := s.Stats().QuotaRefusals; got != 1 {
		t.Fatalf("quota refusals = %d, want 1", got)
	}
}

// TestRefusalsWalkTheStoreOncePerGap: under a flood of refused writes,
// objects stored one after another (100 ms apart) and expiring so do not
// make each expiry walk every object: a walk removes those expired within
// sweepGap of each other together. Before, a refusal walked the store at
// every object's expiry, as often as objects were stored. The walk is
// seen by the objects it removes.
func TestRefusalsWalkTheStoreOncePerGap(t *testing.T) {
	s, clk := newStore(t, Config{TTL: time.Hour})
	s.maxTenantObjects = 2
	put := func(tenant string) error {
		_, err := s.Put(tenant, strings.NewReader("x"), "", "")
		return err
	}
	for _, p := range []struct { // t1 twice, 100 ms apart; t2 twice, later
		after  time.Duration
		tenant string
	}{{0, "t1"}, {100 * time.Millisecond, "t1"}, {10 * time.Minute, "t2"}, {0, "t2"}} {
		clk.Advance(p.after)
		if err := put(p.tenant); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(when string, objects int) {
		t.Helper()
		if err := put("t2"); !errors.Is(err, ErrQuota) {
			t.Fatalf("%s: t2 past its object count: err = %v, want ErrQuota", when, err)
		}
		if got := s.Stats().Objects; got != objects {
			t.Fatalf("%s: %d objects, want %d", when, got, objects)
		}
	}
	clk.Advance(time.Hour - 10*time.Minute - 100*time.Millisecond) // t1's first object expires
	refused("at t1's first expiry", 3)
	clk.Advance(100 * time.Millisecond) // t1's second object expires
	refused("at t1's second expiry, 100 ms after a walk", 3)
	clk.Advance(sweepGap - 100*time.Millisecond)
	refused("a sweepGap after the walk", 2)
}
