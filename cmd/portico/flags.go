package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/upstream"
)

// listenFlag collects repeated -listen pool=addr values.
type listenFlag []gateway.Listener

func (f *listenFlag) String() string {
	parts := make([]string, len(*f))
	for i, l := range *f {
		parts[i] = l.Pool + "=" + l.Addr
	}
	return strings.Join(parts, ",")
}

func (f *listenFlag) Set(v string) error {
	pool, addr, ok := strings.Cut(v, "=")
	if !ok || pool == "" || addr == "" {
		return fmt.Errorf("want pool=addr, got %q", v)
	}
	*f = append(*f, gateway.Listener{Pool: pool, Addr: addr})
	return nil
}

// prefixFlag collects repeated CIDR prefixes.
type prefixFlag []netip.Prefix

func (f *prefixFlag) String() string {
	parts := make([]string, len(*f))
	for i, p := range *f {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

func (f *prefixFlag) Set(v string) error {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		addr, aerr := netip.ParseAddr(v)
		if aerr != nil {
			return err
		}
		p = netip.PrefixFrom(addr, addr.BitLen())
	}
	*f = append(*f, p)
	return nil
}

// identityFlag collects repeated -upstream-identity NAME=CERT,KEY values.
type identityFlag []upstream.IdentityFiles

func (f *identityFlag) String() string {
	parts := make([]string, len(*f))
	for i, id := range *f {
		parts[i] = id.Name + "=" + id.CertFile + "," + id.KeyFile
	}
	return strings.Join(parts, " ")
}

func (f *identityFlag) Set(v string) error {
	id, err := upstream.ParseIdentityFlag(v)
	if err != nil {
		return err
	}
	*f = append(*f, id)
	return nil
}

// listeners combines cleartext and TLS listeners; TLS ones get cert.
func listeners(plain, secure listenFlag, cert *tls.Certificate) ([]gateway.Listener, error) {
	out := append([]gateway.Listener(nil), plain...)
	if len(secure) > 0 && cert == nil {
		return nil, fmt.Errorf("-tls-listen needs -tls-cert and -tls-key")
	}
	for _, l := range secure {
		l.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		out = append(out, l)
	}
	return out, nil
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// stringsFlag collects the values of a repeatable flag.
type stringsFlag []string

func (f *stringsFlag) String() string { return strings.Join(*f, ",") }

func (f *stringsFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// readToken reads a token file: one token, surrounding space ignored, at
// least 32 characters.
func readToken(path string) (string, error) {
	tok, err := readSecret(path)
	if err != nil {
		return "", err
	}
	if len(tok) < 32 {
		return "", fmt.Errorf("%s: the token is shorter than 32 characters", path)
	}
	return tok, nil
}

// readSecret reads a file holding one secret (a token, a password),
// surrounding space ignored.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
