package registry_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/registry"
	"connector/store"
)

// TestEnrollTokenSingleUse: a token is redeemed once, by its tenant, before
// its expiry; a second enrollment of the same gateway rotates its secret.
func TestEnrollTokenSingleUse(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	for _, id := range []string{"acme", "other"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.MintEnrollToken(ctx, "nobody", 0); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("token for an unknown tenant: %v, want ErrNotFound", err)
	}
	tok, exp, err := r.MintEnrollToken(ctx, "acme", time.Hour)
	if err != nil || !exp.Equal(c.Now().Add(time.Hour)) {
		t.Fatalf("MintEnrollToken = %v, %v", exp, err)
	}
	if _, err := r.Enroll(ctx, "other", tok, "gw1", ""); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("another tenant's token: %v, want ErrEnrollToken", err)
	}
	if _, err := r.Enroll(ctx, "acme", tok+"x", "gw1", ""); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("a wrong token: %v, want ErrEnrollToken", err)
	}
	if _, err := r.Enroll(ctx, "acme", tok, "gw1", "ftp://x/"); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("a bad wake URL: %v, want ErrInvalid, the token kept", err) // the one check of it (POST /relay/enroll's)
	}
	first, err := r.Enroll(ctx, "acme", tok, "gw1", "")
	if err != nil || first == "" {
		t.Fatalf("Enroll = %q, %v", first, err)
	}
	if _, err := r.Enroll(ctx, "acme", tok, "gw2", ""); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("a spent token: %v, want ErrEnrollToken", err)
	}
	s, _ := effective(t, r)
	if got := secretsOf(s, "gw1"); len(got) != 1 || got[0] != first {
		t.Fatalf("gw1 secrets %d after enrollment, want the one returned", len(got))
	}

	// Enrolling gw1 again rotates: the old secret keeps the grace.
	tok2, _, _ := r.MintEnrollToken(ctx, "acme", 0)
	second, err := r.Enroll(ctx, "acme", tok2, "gw1", "")
	if err != nil || second == first {
		t.Fatalf("re-enrollment = %v; want a new secret", err)
	}
	s, _ = effective(t, r)
	if got := secretsOf(s, "gw1"); len(got) != 2 || got[0] != second || got[1] != first {
		t.Fatalf("after re-enrollment gw1 has %d secrets, want the new then the old", len(got))
	}
	// Another tenant cannot take gw1 over with its own token.
	tok3, _, _ := r.MintEnrollToken(ctx, "other", 0)
	if _, err := r.Enroll(ctx, "other", tok3, "gw1", ""); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("enrolling another tenant's gateway id: %v, want ErrConflict", err)
	}
	// Expiry.
	tok4, _, _ := r.MintEnrollToken(ctx, "acme", time.Minute)
	c.Advance(time.Minute)
	if _, err := r.Enroll(ctx, "acme", tok4, "gw3", ""); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("an expired token: %v, want ErrEnrollToken", err)
	}
}

// TestProvisionAnswersASecretToItsTokenOnly: provisioning creates the
// gateway, answers the same secret to the same token (one secret for
// every fronted platform of one boot), a fresh one to another token (the
// next boot; the earlier secret keeps DefaultGrace), and refuses gateways
// it did not make. admit is asked before every creation and rotation,
// never for a repeat, and its refusal changes nothing.
func TestProvisionAnswersASecretToItsTokenOnly(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	admits := 0
	admit := func() error { admits++; return nil }
	if _, _, err := r.Provision(ctx, "acme", "gw1", "boot1", admit); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("provision for an unknown tenant: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"acme", "other"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	s1, outcome, err := r.Provision(ctx, "acme", "gw1", "boot1", admit)
	if err != nil || outcome != registry.ProvisionCreated || s1 == "" {
		t.Fatalf("first Provision = %s, %v", outcome, err)
	}
	s2, outcome, err := r.Provision(ctx, "acme", "gw1", "boot1", admit)
	if err != nil || outcome != registry.ProvisionRepeated || s2 != s1 {
		t.Fatalf("the same token again = %s, same secret %v, %v", outcome, s2 == s1, err)
	}
	s3, outcome, err := r.Provision(ctx, "acme", "gw1", "boot2", admit)
	if err != nil || outcome != registry.ProvisionRotated || s3 == s1 {
		t.Fatalf("another token = %s, same secret %v, %v; want a fresh one", outcome, s3 == s1, err)
	}
	if admits != 2 {
		t.Fatalf("admit asked %d times, want 2 (the creation and the rotation)", admits)
	}
	s, _ := effective(t, r)
	if got := secretsOf(s, "gw1"); len(got) != 2 || got[0] != s3 || got[1] != s1 {
		t.Fatalf("gw1 accepts %d secrets, want the rotated one then the first (its grace)", len(got))
	}
	c.Advance(registry.DefaultGrace)
	if s, _ = effective(t, r); len(secretsOf(s, "gw1")) != 1 {
		t.Fatal("the first secret outlived the grace")
	}
	if again, outcome, _ := r.Provision(ctx, "acme", "gw1", "boot1", admit); again == s1 || outcome != registry.ProvisionRotated {
		t.Fatalf("the first boot's token after a rotation = %s; want a fresh secret", outcome)
	}

	refuse := errors.New("slow down")
	before, _ := effective(t, r)
	if _, _, err := r.Provision(ctx, "acme", "gw1", "boot3", func() error { return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("a refused rotation: %v, want admit's error", err)
	}
	if _, _, err := r.Provision(ctx, "acme", "gw9", "boot3", func() error { return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("a refused creation: %v, want admit's error", err)
	}
	if after, _ := effective(t, r); len(after.Gateways) != len(before.Gateways) || secretsOf(after, "gw1")[0] != secretsOf(before, "gw1")[0] {
		t.Fatal("a refused admit changed the registry")
	}

	if _, _, err := r.Provision(ctx, "other", "gw1", "x", admit); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("another tenant provisioning gw1: %v, want ErrConflict", err)
	}
	if _, _, err := r.Provision(ctx, "acme", "bad id", "x", admit); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("a malformed gateway id: %v, want ErrInvalid", err)
	}
	if _, err := r.CreateGateway(ctx, "acme", "gw-admin"); err != nil {
		t.Fatal(err)
	}
	tok, _, _ := r.MintEnrollToken(ctx, "acme", 0)
	if _, err := r.Enroll(ctx, "acme", tok, "gw-enrolled", ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gw-admin", "gw-enrolled"} {
		if secret, _, err := r.Provision(ctx, "acme", id, "boot1", admit); !errors.Is(err, registry.ErrConflict) || secret != "" {
			t.Fatalf("provisioning %s: %v, want ErrConflict and no secret", id, err)
		}
	}
	// Enrolling a provisioned gateway pins it: provision leaves it alone.
	tok, _, _ = r.MintEnrollToken(ctx, "acme", 0)
	if _, err := r.Enroll(ctx, "acme", tok, "gw1", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Provision(ctx, "acme", "gw1", "boot4", admit); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("provisioning an enrolled gateway: %v, want ErrConflict", err)
	}
}

// TestGatewayCap: a tenant's gateways, declared and stored together, stop
// at its max_gateways (default 100, settable per tenant, on create, with
// SetMaxGateways and in the YAML), for the admin API, enrollment (the
// token stays unspent) and provision alike.
func TestGatewayCap(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml", MaxGateways: 2}},
		Gateways: []registry.Gateway{{ID: "ygw", Tenant: "yaml", Secrets: []registry.Secret{{Value: "s"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDeclared(registry.State{Tenants: []registry.Tenant{{ID: "bad", MaxGateways: registry.GatewayLimitCeiling + 1}}}); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("a declared bound above the ceiling: %v, want ErrInvalid", err)
	}
	if _, err := r.CreateGateway(ctx, "yaml", "y2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGateway(ctx, "yaml", "y3"); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("a third gateway of a tenant declared with 2 (one in the YAML): %v, want ErrLimit", err)
	}
	if err := r.SetMaxGateways(ctx, "yaml", 5); !errors.Is(err, registry.ErrDeclared) {
		t.Fatalf("SetMaxGateways of a declared tenant: %v, want ErrDeclared", err)
	}

	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	for i := range registry.DefaultMaxGateways {
		if _, err := r.CreateGateway(ctx, "acme", fmt.Sprintf("gw%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CreateGateway(ctx, "acme", "one-more"); !errors.Is(err, registry.ErrLimit) || !strings.Contains(err.Error(), "max_gateways is 100") {
		t.Fatalf("gateway 101 by the admin API: %v, want ErrLimit naming the bound", err)
	}
	tok, _, _ := r.MintEnrollToken(ctx, "acme", 0)
	if _, err := r.Enroll(ctx, "acme", tok, "one-more", ""); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("gateway 101 by enrollment: %v, want ErrLimit", err)
	}
	if _, _, err := r.Provision(ctx, "acme", "one-more", "boot", func() error { return nil }); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("gateway 101 by provision: %v, want ErrLimit", err)
	}
	if err := r.SetMaxGateways(ctx, "acme", 101); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enroll(ctx, "acme", tok, "one-more", ""); err != nil {
		t.Fatalf("the enrollment token after the bound was raised: %v (it must not have been spent)", err)
	}
	for _, bad := range []int{-1, registry.GatewayLimitCeiling + 1} {
		if err := r.SetMaxGateways(ctx, "acme", bad); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("SetMaxGateways(%d): %v, want ErrInvalid", bad, err)
		}
		if err := r.CreateTenant(ctx, registry.Tenant{ID: "t" + strconv.Itoa(bad), MaxGateways: bad}); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("CreateTenant with max_gateways %d: %v, want ErrInvalid", bad, err)
		}
	}
	if err := r.SetMaxGateways(ctx, "nobody", 5); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("SetMaxGateways of an unknown tenant: %v, want ErrNotFound", err)
	}
}

// TestGatewayCapExactAcrossInstancesOnRedis: two instances on one
// redis-server; tenant a has room for one more gateway, and while
// instance one's creation of gw-1, having counted a's gateways, writes it,
// instance two provisions gw-2. Of the two, one gateway stays and the
// other request is ErrLimit; so for an enrollment racing a creation.
// Before, each instance counted on its own and both were made.
func TestGatewayCapExactAcrossInstancesOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a", MaxGateways: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.CreateGateway(ctx, "a", "gw-0"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		one  func() error
		two  func() error
	}{
		{"creation and provision", func() error {
			_, err := one.CreateGateway(ctx, "a", "gw-1")
			return err
		}, func() error {
			_, _, err := two.Provision(ctx, "a", "gw-2", registry.MinterOf("identity"), func() error { return nil })
			return err
		}},
		{"enrollment and creation", func() error {
			token, _, err := one.MintEnrollToken(ctx, "a", time.Hour)
			if err == nil {
				_, err = one.Enroll(ctx, "a", token, "gw-1", "")
			}
			return err
		}, func() error {
			_, err := two.CreateGateway(ctx, "a", "gw-2")
			return err
		}},
	} {
		var raced atomic.Bool
		var twoErr error
		hooked.before = func(op, namespace, key string) {
			if op == "cas" && namespace == "registry/gateways" && key == "gw-1" && raced.CompareAndSwap(false, true) {
				twoErr = tc.two()
			}
		}
		oneErr := tc.one()
		hooked.before = nil
		if !raced.Load() {
			t.Fatalf("%s: the hook never ran: instance one wrote no gateway", tc.name)
		}
		if (oneErr == nil) == (twoErr == nil) || !errors.Is(cmp.Or(oneErr, twoErr), registry.ErrLimit) {
			t.Fatalf("%s of the last gateway on two instances at once: %v and %v, want one made, the other ErrLimit", tc.name, oneErr, twoErr)
		}
		s, err := two.Stored(ctx)
		if err != nil || len(s.Gateways) != 2 {
			t.Fatalf("%s: stored gateways %+v, %v; want 2 (max_gateways)", tc.name, s.Gateways, err)
		}
		for _, id := range []string{"gw-1", "gw-2"} {
			if err := one.DeleteGateway(ctx, "a", id); err != nil && !errors.Is(err, registry.ErrNotFound) {
				t.Fatal(err)
			}
		}
	}
}

// TestProvisionSeesNoGatewayTakenBackOnRedis: two instances on one
// redis-server; tenant a has room for many gateways. While instance one
// provisions gw-1 with an identity token, instance two creates gw-2 after
// one counted a's gateways, and once gw-1 is written, before one swaps
// a's gateway guard, two provisions gw-1 with the same token (the
// gateway's next fronted platform) and is answered gw-1's secret again.
// One keeps gw-1 (there is room for it counted again): both answers carry
// the secret gw-1 has. Before, one took gw-1 back and made it again with
// another secret, and the secret two had answered authenticated nothing.
func TestProvisionSeesNoGatewayTakenBackOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	minter := registry.MinterOf("identity")
	admit := func() error { return nil }
	var written, guarding atomic.Bool
	var createErr, twoErr error
	var twoSecret string
	hooked.before = func(op, namespace, key string) {
		switch {
		case op == "cas" && namespace == "registry/gateways" && key == "gw-1" && written.CompareAndSwap(false, true):
			_, createErr = two.CreateGateway(ctx, "a", "gw-2")
		case op == "cas" && namespace == "registry/reserved" && key == "a/gateways" && guarding.CompareAndSwap(false, true):
			twoSecret, _, twoErr = two.Provision(ctx, "a", "gw-1", minter, admit)
		}
	}
	oneSecret, _, oneErr := one.Provision(ctx, "a", "gw-1", minter, admit)
	hooked.before = nil
	if !guarding.Load() || createErr != nil || oneErr != nil || twoErr != nil {
		t.Fatalf("hook ran %v; creation of gw-2 %v, provisions of gw-1 %v and %v", guarding.Load(), createErr, oneErr, twoErr)
	}
	for _, secret := range []string{oneSecret, twoSecret} {
		if ok, err := two.GatewayHolds(ctx, "a", "gw-1", []byte(secret)); err != nil || !ok {
			t.Fatalf("gw-1 holds the secret a provision answered: %v, %v; want true", ok, err)
		}
	}
}

// TestProvisionCancelledMidWriteLeavesItWhole: the provision's request is
// given up once gw-1 is written, before a's gateway guard is swapped (the
// store refuses writes on a cancelled context). The guard swap runs to
// completion all the same: the provision is answered, gw-1 holds its
// secret, and the retry with the same token is answered that secret,
// repeated. Before, the guard swap failed, gw-1 was taken back, and the
// retry made it again with another secret.
func TestProvisionCancelledMidWriteLeavesItWhole(t *testing.T) {
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	hooked := &hookedStore{Store: store.NewMemory(c)}
	t.Cleanup(func() { _ = hooked.Close() })
	r := registry.New(hooked, c)
	if err := r.CreateTenant(context.Background(), registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	hooked.cas = func(ctx context.Context, namespace, key string) error {
		if namespace == "registry/gateways" && key == "gw-1" {
			hangUp()
		}
		return ctx.Err()
	}
	minter := registry.MinterOf("identity")
	admit := func() error { return nil }
	secret, outcome, err := r.Provision(ctx, "a", "gw-1", minter, admit)
	hooked.cas = nil
	if err != nil || outcome != registry.ProvisionCreated {
		t.Fatalf("provision given up mid-write: %q, %v; want created", outcome, err)
	}
	if ok, err := r.GatewayHolds(context.Background(), "a", "gw-1", []byte(secret)); err != nil || !ok {
		t.Fatalf("gw-1 holds the secret the provision answered: %v, %v; want true", ok, err)
	}
	again, outcome, err := r.Provision(context.Background(), "a", "gw-1", minter, admit)
	if err != nil || outcome != registry.ProvisionRepeated || again != secret {
		t.Fatalf("retry with the same token: %q, %v, same secret %v; want the secret repeated", outcome, err, again == secret)
	}
}

// TestProvisionRacingItsTwinOnRedis: two instances on one redis-server;
// while instance one provisions gw-1 with an identity token, having found
// no gateway of the id, instance two provisions gw-1 with the same token
// (the boot's next platform) and creates it. One is answered the same
// secret, repeated. Before, its creation found the id taken and it was
// ErrExists (409), though the gateway was its token's.
func TestProvisionRacingItsTwinOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	minter := registry.MinterOf("identity")
	admit := func() error { return nil }
	var raced atomic.Bool
	var twoSecret string
	var twoErr error
	hooked.before = func(op, namespace, key string) {
		if op == "cas" && namespace == "registry/gateways" && key == "gw-1" && raced.CompareAndSwap(false, true) {
			twoSecret, _, twoErr = two.Provision(ctx, "a", "gw-1", minter, admit)
		}
	}
	oneSecret, outcome, oneErr := one.Provision(ctx, "a", "gw-1", minter, admit)
	hooked.before = nil
	if !raced.Load() || twoErr != nil || oneErr != nil || outcome != registry.ProvisionRepeated || oneSecret != twoSecret {
		t.Fatalf("hook ran %v; provisions of gw-1 with one token on two instances at once: %v and %v (%s), same secret %v; want both answered it, one repeated",
			raced.Load(), twoErr, oneErr, outcome, oneSecret == twoSecret)
	}
}

// TestGatewayCapExactForRacingCreations: tenant a has room for one more
// gateway; while the admin API's creation of gw-1 is about to write it, a
// provision of gw-2 starts on the instance. The provision counts a's
// gateways only once the creation is done (the tenant's turn): exactly
// one of the two is made, the other is ErrLimit.
func TestGatewayCapExactForRacingCreations(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	hooked := &hookedStore{Store: store.NewMemory(c)}
	t.Cleanup(func() { _ = hooked.Close() })
	r := registry.New(hooked, c)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a", MaxGateways: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGateway(ctx, "a", "gw-0"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var racing atomic.Bool
	counted := make(chan struct{}, 1)
	provisioned := make(chan error, 1)
	hooked.before = func(op, namespace, key string) {
		switch {
		case op == "list" && namespace == "registry/gateways" && racing.Load():
			select {
			case counted <- struct{}{}:
			default:
			}
		case op == "cas" && namespace == "registry/gateways" && key == "gw-1":
			once.Do(func() {
				racing.Store(true)
				go func() {
					_, _, err := r.Provision(ctx, "a", "gw-2", registry.MinterOf("identity"), func() error { return nil })
					provisioned <- err
				}()
				// The provision must wait for a's turn, not count: seen on
				// its goroutine's stack, within a deadline.
				for deadline := time.Now().Add(5 * time.Second); ; runtime.Gosched() {
					select {
					case <-counted:
						t.Error("the provision counted a's gateways while the creation of gw-1 was writing")
						return
					default:
					}
					if waitingInTurn("Provision") {
						return
					}
					if time.Now().After(deadline) {
						t.Error("the provision neither counted a's gateways nor waited for a's turn within 5s")
						return
					}
				}
			})
		}
	}
	_, created := r.CreateGateway(ctx, "a", "gw-1")
	var err error
	select {
	case err = <-provisioned:
	case <-time.After(5 * time.Second):
		t.Fatal("the provision did not return within 5s of the creation")
	}
	if (created == nil) == (err == nil) || !errors.Is(cmp.Or(created, err), registry.ErrLimit) {
		t.Fatalf("creation %v, provision %v: want exactly one made, the other ErrLimit", created, err)
	}
}

// waitingInTurn reports whether a goroutine running the Registry's method
// waits for a tenant's turn (tenantTurn) on its stack.
func waitingInTurn(method string) bool {
	buf := make([]byte, 1<<20)
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "registry.(*Registry).tenantTurn(") && strings.Contains(g, "registry.(*Registry)."+method+"(") {
			return true
		}
	}
	return false
}

// TestWakeURLs: a wake URL is set for a gateway of the tenant, checked,
// replaced, cleared, and forgotten with its gateway.
func TestWakeURLs(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml"}},
		Gateways: []registry.Gateway{{ID: "ygw", Tenant: "yaml", Secrets: []registry.Secret{{Value: "s"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGateway(ctx, "acme", "gw1"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetWake(ctx, "acme", "gw1", "ftp://x/"); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("ftp wake URL: %v, want ErrInvalid", err)
	}
	if err := r.SetWake(ctx, "acme", "ygw", "https://x/"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("another tenant's gateway: %v, want ErrNotFound", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.SetWake(ctx, "acme", "gw1", "https://a.example/wake"))
	must(r.SetWake(ctx, "acme", "gw1", "https://b.example/wake"))
	must(r.SetWake(ctx, "yaml", "ygw", "http://127.0.0.1:9/"))
	targets := func(tenant string) []string {
		t.Helper()
		ts, err := r.WakeTargets(ctx, tenant)
		must(err)
		var out []string
		for _, x := range ts {
			out = append(out, x.Gateway+"="+x.URL)
		}
		return out
	}
	if got := targets("acme"); len(got) != 1 || got[0] != "gw1=https://b.example/wake" {
		t.Fatalf("acme targets %q", got)
	}
	if got := targets("yaml"); len(got) != 1 || got[0] != "ygw=http://127.0.0.1:9/" {
		t.Fatalf("yaml targets %q", got)
	}
	must(r.SetWake(ctx, "yaml", "ygw", ""))
	if got := targets("yaml"); len(got) != 0 {
		t.Fatalf("after clearing: %q", got)
	}
	must(r.DeleteGateway(ctx, "acme", "gw1"))
	if _, err := r.CreateGateway(ctx, "acme", "gw1"); err != nil {
		t.Fatal(err)
	}
	if got := targets("acme"); len(got) != 0 {
		t.Fatalf("a re-created gateway inherited the wake URL: %q", got)
	}
}

// TestEnrollTokenLifetimeIsBounded (issue 22): an enrollment token lives
// at most 24 h. Minting a longer one is refused (ErrInvalid), and a stored
// token whose expiry lies further ahead (minted by an older connector
// before the bound, with a 100-year lifetime) is refused when redeemed,
// and not spent. A 24 h token works.
func TestEnrollTokenLifetimeIsBounded(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	clk := clocktest.New(now)
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, clk)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{100 * 365 * 24 * time.Hour, 24*time.Hour + time.Second} {
		if tok, exp, err := r.MintEnrollToken(ctx, "acme", ttl); !errors.Is(err, registry.ErrInvalid) || tok != "" {
			t.Errorf("MintEnrollToken(%v) = %q expiring %v, %v; want ErrInvalid", ttl, tok, exp, err)
		}
	}
	tok, exp, err := r.MintEnrollToken(ctx, "acme", 24*time.Hour)
	if err != nil || !exp.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("MintEnrollToken(24h) = %v, %v", exp, err)
	}
	if _, err := r.Enroll(ctx, "acme", tok, "gw1", ""); err != nil {
		t.Fatalf("redeeming a 24 h token: %v", err)
	}

	const old = "enr_minted-by-an-older-connector"
	sum := sha256.Sum256([]byte(old))
	rec, _ := json.Marshal(map[string]any{"tenant": "acme", "expires": now.Add(100 * 365 * 24 * time.Hour)})
	if _, err := st.Registry().Put(ctx, "registry/enroll", hex.EncodeToString(sum[:]), rec); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enroll(ctx, "acme", old, "gw2", ""); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("redeeming a stored 100-year token: %v, want ErrEnrollToken", err)
	}
	if s, _, _ := r.Effective(ctx); slices.ContainsFunc(s.Gateways, func(g registry.Gateway) bool { return g.ID == "gw2" }) {
		t.Fatal("a 100-year token created a gateway")
	}
}

// TestDeleteTenantEndsItsTokens: deleting a tenant ends its unredeemed
// enrollment tokens and link codes with it. Were they kept, a tenant made
// again under the same id (for whoever the operator gives it to) would
// take a gateway enrolled, or a user linked, with a token or code minted
// for the deleted one. Another tenant's stay redeemable.
func TestDeleteTenantEndsItsTokens(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	for _, id := range []string{"acme", "other"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	tok, _, err := r.MintEnrollToken(ctx, "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, _, err := r.IssueLinkCode(ctx, "acme", "gw-acme", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	otherTok, _, _ := r.MintEnrollToken(ctx, "other", time.Hour)
	otherCode, _, _ := r.IssueLinkCode(ctx, "other", "gw-other", "", 0)
	if err := r.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enroll(ctx, "acme", tok, "gw1", ""); !errors.Is(err, registry.ErrEnrollToken) {
		t.Errorf("the deleted tenant's enrollment token, redeemed for the tenant made again: %v, want ErrEnrollToken", err)
	}
	if tenant, _, err := r.RedeemLinkCode(ctx, "discord", "71", code); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("the deleted tenant's link code: linked to %q, %v; want ErrNotFound", tenant, err)
	}
	if _, err := r.Enroll(ctx, "other", otherTok, "gw2", ""); err != nil {
		t.Errorf("another tenant's enrollment token: %v", err)
	}
	if tenant, _, err := r.RedeemLinkCode(ctx, "discord", "72", otherCode); err != nil || tenant != "other" {
		t.Errorf("another tenant's link code: %q, %v", tenant, err)
	}
}

// TestWakeTargetsListsTheURLsWhenChangedOnRedis: WakeTargets, called per
// poke, lists every tenant's wake URLs only when one changed since its
// last listing, on any instance, and then gives the new one. Before, each
// poke listed them all (10,000 tenants: about 100 ms a poke).
func TestWakeTargetsListsTheURLsWhenChangedOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.CreateGateway(ctx, "a", "gw1"); err != nil {
		t.Fatal(err)
	}
	if err := one.SetWake(ctx, "a", "gw1", "https://a.example/wake"); err != nil {
		t.Fatal(err)
	}
	lists := 0
	hooked.before = func(op, namespace, _ string) {
		if op == "list" && namespace == "registry/wake" {
			lists++
		}
	}
	targets := func() string {
		t.Helper()
		ts, err := one.WakeTargets(ctx, "a")
		if err != nil || len(ts) != 1 {
			t.Fatalf("a's wake targets %v, %v; want one", ts, err)
		}
		return ts[0].URL
	}
	for range 3 {
		if url := targets(); url != "https://a.example/wake" {
			t.Fatalf("a's wake URL %q", url)
		}
	}
	if lists != 1 {
		t.Fatalf("3 looks at unchanged wake URLs listed them %d times, want once", lists)
	}
	if err := two.SetWake(ctx, "a", "gw1", "https://b.example/wake"); err != nil {
		t.Fatal(err)
	}
	if url := targets(); url != "https://b.example/wake" {
		t.Fatalf("a's wake URL after instance two changed it: %q", url)
	}
}

// TestTakenGatewayCostsTheSameWhateverTheLayer: a provision or an
// enrollment of a gateway id the YAML declares and one of an id another
// tenant stored make the same store calls before their one 409 answer,
// so its time tells the caller no more than its text which layer holds
// the id. Before, a declared id was answered before any store call (the
// tenant's turn, the gateway's read): a round trip sooner.
func TestTakenGatewayCostsTheSameWhateverTheLayer(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory(clocktest.New(time.Unix(1_700_000_000, 0)))
	t.Cleanup(func() { _ = st.Close() })
	hooked := &hookedStore{Store: st}
	r := registry.New(hooked, clocktest.New(time.Unix(1_700_000_000, 0)))
	if err := r.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml"}},
		Gateways: []registry.Gateway{{ID: "ygw", Tenant: "yaml", Secrets: []registry.Secret{{Value: "s"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CreateGateway(ctx, "a", "agw"); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	hooked.before = func(string, string, string) { calls.Add(1) }
	hooked.get = func(string, string) error { calls.Add(1); return nil }
	counted := func(f func() error) int {
		t.Helper()
		calls.Store(0)
		if err := f(); !errors.Is(err, registry.ErrConflict) {
			t.Fatalf("a taken id: %v, want ErrConflict", err)
		}
		return int(calls.Load())
	}
	if _, _, err := r.Provision(ctx, "b", "bgw", "boot", func() error { return nil }); err != nil {
		t.Fatal(err) // b's turn and gateway guard are in the store for both
	}
	provision := func(id string) func() error {
		return func() error { _, _, err := r.Provision(ctx, "b", id, "boot", func() error { return nil }); return err }
	}
	if declared, stored := counted(provision("ygw")), counted(provision("agw")); declared != stored {
		t.Errorf("provision of a declared id made %d store calls, of another tenant's %d; want the same", declared, stored)
	}
	enroll := func(id string) func() error {
		return func() error {
			tok, _, err := r.MintEnrollToken(ctx, "b", 0)
			if err != nil {
				return err
			}
			calls.Store(0)
			_, err = r.Enroll(ctx, "b", tok, id, "")
			return err
		}
	}
	if declared, stored := counted(enroll("ygw")), counted(enroll("agw")); declared != stored {
		t.Errorf("enrollment of a declared id made %d store calls, of another tenant's %d; want the same", declared, stored)
	}
}

// TestProvisionOfATenantNotOnboardedTellsNoIDApart: a caller whose tenant
// the connector does not know gets one answer (ErrNotFound: not
// onboarded) whether the gateway id it names is declared in the YAML,
// another tenant's, or free. Before, a declared id was ErrConflict ahead
// of the tenant's check, so such a caller learned which ids the YAML
// declares.
func TestProvisionOfATenantNotOnboardedTellsNoIDApart(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml"}},
		Gateways: []registry.Gateway{{ID: "gw-yaml", Tenant: "yaml", Secrets: []registry.Secret{{Value: "s"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGateway(ctx, "acme", "gw-acme"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gw-yaml", "gw-acme", "gw-free"} {
		if _, _, err := r.Provision(ctx, "ghost", id, "minter", func() error { return nil }); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("provision of %s by a tenant not onboarded: %v, want ErrNotFound", id, err)
		}
	}
}
