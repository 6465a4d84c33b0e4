package load

import (
	"fmt"
	"strings"
	"testing"
)

// nginx is not installed where the harness was written, so at least the
// configuration it would be given is checked here.
func TestNginxConfig(t *testing.T) {
	t.Parallel()
	conf := fmt.Sprintf(nginxConfig, "/tmp/x", "127.0.0.1:1000", "127.0.0.1:2000")
	for _, want := range []string{"pid /tmp/x/nginx.pid;", "server 127.0.0.1:1000;", "listen 127.0.0.1:2000;", "proxy_http_version 1.1;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "%!") {
		t.Errorf("config has a formatting error:\n%s", conf)
	}
	if strings.Count(conf, "{") != strings.Count(conf, "}") {
		t.Errorf("config braces do not balance:\n%s", conf)
	}
}
