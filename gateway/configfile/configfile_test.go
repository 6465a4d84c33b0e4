package configfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/configfile"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

const yamlConfig = `
version: "42"
clusters:
  - name: orders
    protocol: PROTOCOL_GRPC
    endpoints:
      - address: 10.0.0.1:9000
    healthCheck:
      interval: 2s
      grpc: {}
routes:
  - id: orders-get
    team: orders
    hosts: [api.example.com]
    methods: [GET]
    path: /v1/orders/{order_id}
    cluster: orders
    timeout: 1.5s
    max_request_bytes: 65536
    headers:
      - name: x-api-version
        exact: "2026-01"
`

func TestParseYAMLAndJSON(t *testing.T) {
	t.Parallel()
	y, err := configfile.Parse([]byte(yamlConfig), configfile.YAML)
	if err != nil {
		t.Fatalf("Parse(yaml): %v", err)
	}
	r := y.GetRoutes()[0]
	if y.GetVersion() != "42" || r.GetPath() != "/v1/orders/{order_id}" || r.GetTimeout().AsDuration().Seconds() != 1.5 ||
		r.GetMaxRequestBytes() != 65536 || r.GetHeaders()[0].GetExact() != "2026-01" ||
		y.GetClusters()[0].GetProtocol() != configv1.Protocol_PROTOCOL_GRPC || y.GetClusters()[0].GetHealthCheck().GetGrpc() == nil {
		t.Errorf("Parse(yaml) = %v", y)
	}
	j, err := configfile.Parse([]byte(`{"version":"42","routes":[{"id":"a","team":"t","path":"/x","cluster":"c"}]}`), configfile.Auto)
	if err != nil || j.GetRoutes()[0].GetId() != "a" {
		t.Errorf("Parse(json, Auto) = %v, %v", j, err)
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data, want string
	}{
		{"unknown field", "routes:\n  - id: a\n    pathh: /x\n", "pathh"},
		{"unknown top-level field", "routez: []\n", "routez"},
		{"duplicate key", "version: a\nversion: b\n", "version"},
		{"bad enum", "clusters:\n  - name: a\n    protocol: PROTOCOL_SMOKE\n", "PROTOCOL_SMOKE"},
		{"bad duration", "routes:\n  - timeout: soon\n", `Duration value "soon"`},
		{"yaml syntax", "routes: [\n", "yaml"},
		{"json syntax", `{"routes": [}`, "config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configfile.Parse([]byte(tc.data), configfile.Auto)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q) = %v, want an error mentioning %q", tc.data, err, tc.want)
			}
		})
	}
}

func TestLoadSetsVersion(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "edge.json")
	if err := os.WriteFile(path, []byte(`{"routes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := configfile.Load(path)
	if err != nil || cfg.GetVersion() != "file:edge.json" {
		t.Errorf("Load = %v, %v; want version file:edge.json", cfg, err)
	}
	if _, err := configfile.Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}
