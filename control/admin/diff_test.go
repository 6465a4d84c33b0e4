package admin_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/portico-gw/portico/control/admin"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// TestDiffSeesEveryPlatformField: a change that Diff does not see makes
// no version at all (an empty diff is "nothing changed"), so every field
// of the platform's objects must show in it. A field added to Platform
// without a line in Diff fails here.
func TestDiffSeesEveryPlatformField(t *testing.T) {
	t.Parallel()
	fields := (&adminv1.Platform{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		b := &adminv1.Platform{}
		m := b.ProtoReflect()
		switch {
		case fd.IsList() && fd.Message() != nil:
			elem := m.Mutable(fd).List().NewElement()
			if name := fd.Message().Fields().ByName("name"); name != nil {
				elem.Message().Set(name, protoreflect.ValueOfString("x"))
			}
			m.Mutable(fd).List().Append(elem)
		case fd.Message() != nil:
			m.Mutable(fd)
		default:
			t.Fatalf("Platform.%s: a new kind of field; teach this test (and Diff) about it", fd.Name())
		}
		if d := admin.Diff(&adminv1.Config{}, &adminv1.Config{Platform: b}); d == "" {
			t.Errorf("setting Platform.%s: Diff is empty, so the change would be dropped", fd.Name())
		}
	}
	// A team's upstreams are part of the team.
	a := &adminv1.Config{Teams: []*adminv1.Team{{Name: "orders"}}}
	b := proto.CloneOf(a)
	b.Teams[0].Upstreams = []*adminv1.Upstream{{Address: &adminv1.Upstream_Host{Host: "orders.internal"}}}
	if d := admin.Diff(a, b); d != "~ team orders" {
		t.Errorf("a team's new upstream: Diff %q, want %q", d, "~ team orders")
	}
}
