package keytable

import (
	"reflect"
	"strings"
	"testing"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gclayout"
)

// TestPointerFree keeps the table invisible to the garbage collector: a
// slot holds no pointer, and the Table, and the layers in it, only point at
// blocks of pointer-free values (slices of them, or string bytes).
func TestPointerFree(t *testing.T) {
	t.Parallel()
	if gclayout.HasPointers(reflect.TypeFor[slot]()) {
		t.Errorf("slot holds pointers; every key would cost the collector work")
	}
	var check func(name string, typ reflect.Type)
	check = func(name string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			switch f.Type.Kind() {
			case reflect.String:
			case reflect.Slice:
				if gclayout.HasPointers(f.Type.Elem()) {
					t.Errorf("%s.%s is a %v whose elements hold pointers", name, f.Name, f.Type)
				}
			case reflect.Struct:
				check(name+"."+f.Name, f.Type)
			default:
				if gclayout.HasPointers(f.Type) {
					t.Errorf("%s.%s is a %v, which holds pointers", name, f.Name, f.Type)
				}
			}
		}
	}
	check("Table", reflect.TypeFor[Table]())
	// hasPointers itself must be able to say yes.
	for _, typ := range []reflect.Type{reflect.TypeFor[string](), reflect.TypeFor[Record](), reflect.TypeFor[[2]*int](), reflect.TypeFor[[]byte]()} {
		if !gclayout.HasPointers(typ) {
			t.Errorf("gclayout.HasPointers(%v) = false, want true", typ)
		}
	}
}

// TestArenaShared checks that every distinct string is stored once: key ids,
// then each app, tenant, plan, scope list and successor the first time it
// appears.
func TestArenaShared(t *testing.T) {
	t.Parallel()
	var records []*configv1.KeyRecord
	want := 0
	for i := range 300 {
		h := make([]byte, 32)
		h[0], h[1] = byte(i), byte(i>>8)
		r := &configv1.KeyRecord{
			Sha256: h, KeyId: "key_" + string(rune('a'+i%26)) + strings.Repeat("x", i/26),
			AppId: []string{"app-1", "app-2", "app-3"}[i%3], TenantId: "acme", Plan: "gold",
			Scopes: []string{"a:read", "b:write"}, Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
		}
		if i%100 == 0 {
			r.SuccessorKeyId = "key_next"
		}
		want += len(r.KeyId)
		records = append(records, r)
	}
	want += len("app-1app-2app-3acmegolda:read b:writekey_next")
	tbl, err := Build(records)
	if err != nil {
		t.Fatal(err)
	}
	if len(tbl.base.arena) != want {
		t.Errorf("arena holds %d bytes, want %d", len(tbl.base.arena), want)
	}
}
