package keytable_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/auth/keytable"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// problem is the part of a keytable.Problem a test checks, plus words its
// message must hold.
type problem struct {
	kind         keytable.ProblemKind
	index, other int
	says         []string
}

func TestBuildProblems(t *testing.T) {
	t.Parallel()
	rec := func(keyID string) *configv1.KeyRecord {
		_, r := newKey(t, keyID)
		return r
	}
	for _, tc := range []struct {
		name    string
		records func() []*configv1.KeyRecord
		want    []problem
	}{{
		name: "duplicate hash",
		records: func() []*configv1.KeyRecord {
			a, b, c := rec("key-a"), rec("key-b"), rec("key-c")
			c.Sha256 = a.Sha256
			return []*configv1.KeyRecord{a, b, c}
		},
		want: []problem{{keytable.DuplicateHash, 2, 0, []string{`keys[2] (key "key-c")`, `keys[0] (key "key-a")`, "same sha256"}}},
	}, {
		name: "hash three times, the later two against the first",
		records: func() []*configv1.KeyRecord {
			a, b, c := rec("key-a"), rec("key-b"), rec("key-c")
			b.Sha256, c.Sha256 = a.Sha256, a.Sha256
			return []*configv1.KeyRecord{c, b, a}
		},
		want: []problem{
			{keytable.DuplicateHash, 1, 0, []string{`"key-b"`, `"key-c"`}},
			{keytable.DuplicateHash, 2, 0, []string{`"key-a"`, `"key-c"`}},
		},
	}, {
		name: "duplicate key id",
		records: func() []*configv1.KeyRecord {
			return []*configv1.KeyRecord{rec("key-a"), rec("key-b"), rec("key-a")}
		},
		want: []problem{{keytable.DuplicateKeyID, 2, 0, []string{`keys[2] (key "key-a")`, "also used by keys[0]"}}},
	}, {
		name: "bad hash lengths",
		records: func() []*configv1.KeyRecord {
			a, b, c := rec("a"), rec("b"), rec("c")
			a.Sha256, b.Sha256, c.Sha256 = a.Sha256[:31], append(b.Sha256, 0), nil
			return []*configv1.KeyRecord{a, b, c}
		},
		want: []problem{
			{keytable.InvalidHash, 0, -1, []string{"31 bytes, want 32"}},
			{keytable.InvalidHash, 1, -1, []string{"33 bytes"}},
			{keytable.InvalidHash, 2, -1, []string{"0 bytes"}},
		},
	}, {
		name:    "nil record",
		records: func() []*configv1.KeyRecord { return []*configv1.KeyRecord{rec("a"), nil} },
		want:    []problem{{keytable.NilRecord, 1, -1, []string{"keys[1]: nil record"}}},
	}, {
		name:    "no key id",
		records: func() []*configv1.KeyRecord { return []*configv1.KeyRecord{rec("")} },
		want:    []problem{{keytable.MissingKeyID, 0, -1, []string{"keys[0]: key_id is empty"}}},
	}, {
		name: "status",
		records: func() []*configv1.KeyRecord {
			a, b := rec("a"), rec("b")
			a.Status, b.Status = configv1.KeyStatus_KEY_STATUS_UNSPECIFIED, 7
			return []*configv1.KeyRecord{a, b}
		},
		want: []problem{
			{keytable.InvalidStatus, 0, -1, []string{"KEY_STATUS_UNSPECIFIED"}},
			{keytable.InvalidStatus, 1, -1, []string{"status 7"}},
		},
	}, {
		name: "priority",
		records: func() []*configv1.KeyRecord {
			a, b := rec("a"), rec("b")
			a.Priority, b.Priority = 5, -1
			return []*configv1.KeyRecord{a, b}
		},
		want: []problem{
			{keytable.InvalidPriority, 0, -1, []string{"priority 5"}},
			{keytable.InvalidPriority, 1, -1, []string{"priority -1"}},
		},
	}, {
		name: "not_after",
		records: func() []*configv1.KeyRecord {
			a := rec("a")
			a.NotAfter = &timestamppb.Timestamp{Seconds: 1, Nanos: 1e9}
			return []*configv1.KeyRecord{a}
		},
		want: []problem{{keytable.InvalidNotAfter, 0, -1, []string{"not_after"}}},
	}, {
		name: "text for headers",
		records: func() []*configv1.KeyRecord {
			a, b, c, d, e, f, g, h := rec("a"), rec("b"), rec("c"), rec("d"), rec("e"), rec("f"), rec("g\r\nx-auth-admin: 1"), rec("h")
			a.AppId = "app\n"
			b.TenantId = "acme corp"
			c.Plan = "gold\x00"
			d.SuccessorKeyId = "é"
			e.Scopes = []string{"orders:read", "orders:write admin"}
			f.Scopes = []string{"orders:read", ""}
			g.AppId = "app-g"
			h.Scopes = []string{`a\b`}
			return []*configv1.KeyRecord{a, b, c, d, e, f, g, h}
		},
		want: []problem{
			{keytable.InvalidText, 0, -1, []string{"app_id has byte 0x0a at 3"}},
			{keytable.InvalidText, 1, -1, []string{"tenant_id has byte 0x20"}},
			{keytable.InvalidText, 2, -1, []string{"plan has byte 0x00"}},
			{keytable.InvalidText, 3, -1, []string{"successor_key_id has byte 0xc3"}},
			{keytable.InvalidText, 4, -1, []string{`scopes[1] "orders:write admin"`}},
			{keytable.InvalidText, 5, -1, []string{`scopes[1] ""`}},
			{keytable.InvalidText, 6, -1, []string{"key_id has byte 0x0d"}},
			{keytable.InvalidText, 7, -1, []string{`scopes[0] "a\\b"`}},
		},
	}, {
		name: "too long",
		records: func() []*configv1.KeyRecord {
			a, b := rec("a"), rec("b")
			a.Plan = strings.Repeat("p", 70_000)
			for i := range 1000 {
				b.Scopes = append(b.Scopes, fmt.Sprintf("scope-%04d:%s", i, strings.Repeat("x", 60)))
			}
			return []*configv1.KeyRecord{a, b}
		},
		want: []problem{
			{keytable.InvalidText, 0, -1, []string{"plan is 70000 bytes long"}},
			{keytable.InvalidText, 1, -1, []string{"scopes take"}},
		},
	}, {
		name: "every problem, in record order",
		records: func() []*configv1.KeyRecord {
			a, b, c, d, e := rec("a"), rec("b"), rec("a"), rec("d"), rec("e")
			d.Sha256 = b.Sha256
			d.Status = 0
			e.Priority = 9
			return []*configv1.KeyRecord{a, nil, b, c, d, e}
		},
		want: []problem{
			{keytable.NilRecord, 1, -1, nil},
			{keytable.DuplicateKeyID, 3, 0, nil},
			{keytable.InvalidStatus, 4, -1, nil},
			{keytable.DuplicateHash, 4, 2, []string{`"d"`, `"b"`}},
			{keytable.InvalidPriority, 5, -1, nil},
		},
	}} {
		records := tc.records()
		tbl, err := keytable.Build(records)
		var be *keytable.BuildError
		if tbl != nil || !errors.As(err, &be) {
			t.Errorf("%s: Build = %v, %v; want nil, a *BuildError", tc.name, tbl, err)
			continue
		}
		if len(be.Problems) != len(tc.want) {
			t.Errorf("%s: Build error has %d problems, want %d:\n%v", tc.name, len(be.Problems), len(tc.want), err)
			continue
		}
		for i, w := range tc.want {
			p := be.Problems[i]
			if p.Kind != w.kind || p.Index != w.index || p.Other != w.other {
				t.Errorf("%s: problem %d = %+v, want kind %d, index %d, other %d", tc.name, i, p, w.kind, w.index, w.other)
			}
			for _, s := range w.says {
				if !strings.Contains(p.Error(), s) {
					t.Errorf("%s: problem %d = %q, want it to say %q", tc.name, i, p.Error(), s)
				}
			}
		}
		// The messages never show hash bytes.
		for _, r := range records {
			if h := r.GetSha256(); len(h) >= 4 {
				if msg := err.Error(); strings.Contains(msg, hex.EncodeToString(h[:4])) || strings.Contains(msg, string(h[:4])) {
					t.Errorf("%s: Build error shows hash bytes: %q", tc.name, msg)
				}
			}
		}
	}
}

func TestBuildErrorText(t *testing.T) {
	t.Parallel()
	var records []*configv1.KeyRecord
	for range 25 {
		records = append(records, nil)
	}
	_, err := keytable.Build(records)
	msg := err.Error()
	if lines := strings.Count(msg, "\n"); !strings.HasPrefix(msg, "keytable: 25 problems:\n\tkeys[0]: nil record\n") ||
		lines != 21 || !strings.HasSuffix(msg, "\n\t… and 5 more") {
		t.Errorf("Build(25 nil records) error =\n%s\nwant a summary, 20 problems and a count of the rest", msg)
	}
	_, err = keytable.Build(records[:1])
	if msg, want := err.Error(), "keytable: keys[0]: nil record"; msg != want {
		t.Errorf("Build(1 nil record) error = %q, want %q", msg, want)
	}
}
