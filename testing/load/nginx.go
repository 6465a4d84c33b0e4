package load

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

const defaultNginx = "/usr/sbin/nginx"

// nginxConfig is a single-process nginx proxying everything to backend over
// pooled keep-alive connections, without access logs: the peer DESIGN.md
// compares against.
const nginxConfig = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 30000; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  keepalive_timeout 300s;
  keepalive_requests 10000000;
  upstream backend {
    server %[2]s;
    keepalive 256;
    keepalive_requests 10000000;
  }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`

// startNginx starts nginx on proxyCPU when Options.Nginx (or the default
// path) is an executable; otherwise it notes why not and returns nil.
func (h *harness) startNginx(ctx context.Context) (*target, error) {
	bin := h.opts.Nginx
	switch bin {
	case "none":
		return nil, nil
	case "":
		bin = defaultNginx
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		if !h.nginxNoted {
			h.note("nginx: %s not found, skipped", bin)
			h.nginxNoted = true
		}
		return nil, nil
	}
	dir := filepath.Join(h.dir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	var writeErr error
	p, addr, err := h.startListening(ctx, startSpec{name: "nginx", core: proxyCPU, argv: []string{bin, "-p", dir}},
		func(addr string) []string {
			writeErr = os.WriteFile(conf, fmt.Appendf(nil, nginxConfig, dir, h.backendAddr, addr), 0o644)
			return []string{"-c", conf}
		}, benchPath, "")
	if writeErr != nil {
		return nil, writeErr
	}
	if err != nil {
		return nil, err
	}
	return &target{name: "nginx", addr: addr, proc: p}, nil
}
