package upstream_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/upstream"
	"github.com/portico-gw/portico/testing/testca"
)

func TestParseIdentityFlag(t *testing.T) {
	t.Parallel()
	got, err := upstream.ParseIdentityFlag("orders-mtls=/etc/portico/orders.crt,/etc/portico/orders.key")
	want := upstream.IdentityFiles{Name: "orders-mtls", CertFile: "/etc/portico/orders.crt", KeyFile: "/etc/portico/orders.key"}
	if err != nil || got != want {
		t.Errorf("ParseIdentityFlag = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", "x", "x=a", "x=a,", "=a,b", "X=a,b", "-x=a,b", "a b=c,d"} {
		if _, err := upstream.ParseIdentityFlag(bad); err == nil {
			t.Errorf("ParseIdentityFlag(%q) = nil error, want one", bad)
		}
	}
}

func TestLoadIdentitiesErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testca.New(t, "CA")
	leaf := ca.Issue(t, "gateway", true)
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	writeFile(t, cert, leaf.CertPEM)
	writeFile(t, key, leaf.KeyPEM)
	other := ca.Issue(t, "other", true)
	otherKey := filepath.Join(dir, "other.key")
	writeFile(t, otherKey, other.KeyPEM)

	if ids, err := upstream.LoadIdentities([]upstream.IdentityFiles{{Name: "gw", CertFile: cert, KeyFile: key}}, nil, nil); err != nil || !ids.Has("gw") || ids.Has("other") {
		t.Fatalf("LoadIdentities of a good pair: %v (Has(gw) must be true, Has(other) false)", err)
	}
	tests := []struct {
		name  string
		files []upstream.IdentityFiles
		want  string
	}{
		{"missing certificate", []upstream.IdentityFiles{{Name: "gw", CertFile: dir + "/nope.pem", KeyFile: key}}, `upstream identity "gw": certificate`},
		{"missing key", []upstream.IdentityFiles{{Name: "gw", CertFile: cert, KeyFile: dir + "/nope.key"}}, `upstream identity "gw": key`},
		{"key of another certificate", []upstream.IdentityFiles{{Name: "gw", CertFile: cert, KeyFile: otherKey}}, "private key does not match"},
		{"given twice", []upstream.IdentityFiles{{Name: "gw", CertFile: cert, KeyFile: key}, {Name: "gw", CertFile: cert, KeyFile: key}}, "given twice"},
		{"bad name", []upstream.IdentityFiles{{Name: "GW", CertFile: cert, KeyFile: key}}, "invalid name"},
	}
	for _, tt := range tests {
		_, err := upstream.LoadIdentities(tt.files, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: LoadIdentities error %v, want one mentioning %q", tt.name, err, tt.want)
		}
	}
	var none *upstream.Identities
	if none.Has("gw") || none.Info() != nil {
		t.Error("a nil Identities must hold nothing")
	}
}
