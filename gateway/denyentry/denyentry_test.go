package denyentry_test

import (
	"testing"
	"time"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/denyentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

var t0 = time.Unix(1_800_000_000, 0).UTC()

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

func TestLapse(t *testing.T) {
	t.Parallel()
	const life, leeway = 15 * time.Minute, 30 * time.Second
	jti := func(e *configv1.DenyEntry) *configv1.DenyEntry {
		e.Match = &configv1.DenyEntry_Jti{Jti: "j"}
		return e
	}
	sub := func(e *configv1.DenyEntry) *configv1.DenyEntry {
		e.Match = &configv1.DenyEntry_Subject{Subject: "s"}
		return e
	}
	for _, tc := range []struct {
		name string
		e    *configv1.DenyEntry
		want time.Duration // after t0; keep is KeepUntil's
		keep time.Duration
	}{
		{"a subject entry asking for less is raised to its cut plus the lifetime",
			sub(&configv1.DenyEntry{IssuedBefore: ts(0), Expires: ts(time.Minute)}),
			life + leeway, denyentry.MaxLifetime + denyentry.MaxLeeway},
		{"a subject entry asking for more keeps it",
			sub(&configv1.DenyEntry{IssuedBefore: ts(0), Expires: ts(48 * time.Hour)}),
			48*time.Hour + leeway, 48*time.Hour + denyentry.MaxLeeway},
		{"a jti entry lasts until its token's exp",
			jti(&configv1.DenyEntry{TokenExpires: ts(time.Hour), Expires: ts(time.Minute)}),
			time.Hour + leeway, time.Hour + denyentry.MaxLeeway},
		{"a jti entry without its token's exp lasts a lifetime past the denial",
			jti(&configv1.DenyEntry{IssuedBefore: ts(0), Expires: ts(time.Minute)}),
			life + leeway, denyentry.MaxLifetime + denyentry.MaxLeeway},
		{"a jti entry with both takes the later",
			jti(&configv1.DenyEntry{IssuedBefore: ts(0), TokenExpires: ts(2 * time.Minute), Expires: ts(time.Minute)}),
			life + leeway, denyentry.MaxLifetime + denyentry.MaxLeeway},
		{"a jti entry with nothing else has its expires",
			jti(&configv1.DenyEntry{Expires: ts(time.Minute)}),
			time.Minute + leeway, time.Minute + denyentry.MaxLeeway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := denyentry.Lapse(tc.e, life, leeway); !got.Equal(t0.Add(tc.want)) {
				t.Errorf("Lapse = t0%+v, want t0%+v", got.Sub(t0), tc.want)
			}
			if got := denyentry.KeepUntil(tc.e); !got.Equal(t0.Add(tc.keep)) {
				t.Errorf("KeepUntil = t0%+v, want t0%+v", got.Sub(t0), tc.keep)
			}
		})
	}
	if got := denyentry.Lapse(sub(&configv1.DenyEntry{IssuedBefore: ts(0)}), life, leeway); !got.IsZero() {
		t.Errorf("Lapse without expires = %v, want the zero time", got)
	}
}

// TestBounds: MaxLifetime and MaxLeeway are config.proto's bounds on an
// Issuer, so KeepUntil outlasts every Lapse a node can compute.
func TestBounds(t *testing.T) {
	t.Parallel()
	fields := (&configv1.Issuer{}).ProtoReflect().Descriptor().Fields()
	for name, want := range map[string]time.Duration{"max_token_lifetime": denyentry.MaxLifetime, "leeway": denyentry.MaxLeeway} {
		fd := fields.ByName(protoreflect.Name(name))
		if fd == nil {
			t.Fatalf("Issuer has no field %s", name)
		}
		rules, _ := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
		if got := rules.GetDuration().GetLte().AsDuration(); got != want {
			t.Errorf("Issuer.%s is at most %v in config.proto, the package says %v", name, got, want)
		}
	}
}
