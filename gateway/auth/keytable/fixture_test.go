package keytable_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/apikey"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// fixtureNow is the time the fixture's expiries are relative to.
var fixtureNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fixture is a key population shaped like a real one: 1,000 tenants, apps of
// one to three keys, 10 plans, 50 distinct scope sets, 20-byte key ids; 2 %
// of keys revoked, 1 % expired, 3 % expiring later, 1 % rotated (with a
// successor and a not_after a week ahead).
type fixture struct {
	records []*configv1.KeyRecord
	// keys holds the raw keys back to back, apikey.Len bytes each, in the
	// order of records: one string, so that benchmarks read keys
	// sequentially rather than chase a million pointers.
	keys string
}

func (f *fixture) key(i int) string { return f.keys[i*apikey.Len : (i+1)*apikey.Len] }

const idChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func newFixture(tb testing.TB, n int, seed uint64) *fixture {
	tb.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x6b6579))
	var chachaSeed [32]byte
	chachaSeed[0] = byte(seed)
	src := rand.NewChaCha8(chachaSeed)
	id := func(prefix string, n int) string {
		b := make([]byte, len(prefix), len(prefix)+n)
		copy(b, prefix)
		for range n {
			b = append(b, idChars[rng.IntN(len(idChars))])
		}
		return string(b)
	}

	tenants := make([]string, 1000)
	for i := range tenants {
		tenants[i] = id("tnt_", 10)
	}
	plans := []string{"free", "starter", "developer", "team", "business", "pro", "enterprise", "partner-silver", "partner-gold", "internal"}
	priorities := []configv1.Priority{
		configv1.Priority_PRIORITY_SHEDDABLE, configv1.Priority_PRIORITY_FREE, configv1.Priority_PRIORITY_FREE,
		configv1.Priority_PRIORITY_PAID, configv1.Priority_PRIORITY_PAID, configv1.Priority_PRIORITY_PAID,
		configv1.Priority_PRIORITY_PAID, configv1.Priority_PRIORITY_PARTNER, configv1.Priority_PRIORITY_PARTNER,
		configv1.Priority_PRIORITY_UNSPECIFIED,
	}
	var pool []string
	for _, res := range []string{"orders", "payments", "inventory", "customers", "shipments", "invoices", "catalog", "reports", "webhooks", "users"} {
		for _, act := range []string{"read", "write", "admin", "export"} {
			pool = append(pool, res+":"+act)
		}
	}
	scopeSets := make([][]string, 50)
	for i := range scopeSets {
		perm := rng.Perm(len(pool))
		for _, p := range perm[:rng.IntN(8)+1] {
			scopeSets[i] = append(scopeSets[i], pool[p])
		}
	}

	f := &fixture{records: make([]*configv1.KeyRecord, 0, n)}
	var keys strings.Builder
	keys.Grow(n * apikey.Len)
	hashes := make([]byte, 32*n)
	for len(f.records) < n {
		app, tenant, plan := id("app_", 12), tenants[rng.IntN(len(tenants))], rng.IntN(len(plans))
		scopes := scopeSets[rng.IntN(len(scopeSets))]
		for range min(rng.IntN(3)+1, n-len(f.records)) {
			k, err := apikey.Generate(apikey.Live, src)
			if err != nil {
				tb.Fatal(err)
			}
			keys.WriteString(k)
			i := len(f.records)
			h := apikey.Hash(k)
			copy(hashes[32*i:], h[:])
			r := &configv1.KeyRecord{
				Sha256: hashes[32*i : 32*i+32 : 32*i+32], KeyId: id("key_", 16), AppId: app, TenantId: tenant,
				Plan: plans[plan], Scopes: scopes, Priority: priorities[plan],
				Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
			}
			switch x := rng.IntN(100); {
			case x < 2:
				r.Status = configv1.KeyStatus_KEY_STATUS_REVOKED
			case x < 3:
				r.NotAfter = timestamppb.New(fixtureNow.Add(-time.Duration(rng.IntN(1000)+1) * time.Hour))
			case x < 6:
				r.NotAfter = timestamppb.New(fixtureNow.Add(time.Duration(rng.IntN(1000)+1) * time.Hour))
			case x < 7:
				r.NotAfter = timestamppb.New(fixtureNow.Add(7 * 24 * time.Hour))
				r.SuccessorKeyId = id("key_", 16)
			}
			f.records = append(f.records, r)
		}
	}
	f.keys = keys.String()
	return f
}
