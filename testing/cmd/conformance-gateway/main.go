// Command conformance-gateway is the server under test of the Connect
// conformance suite (connectrpc.com/conformance, server mode) with the
// gateway in front: it reads a ServerCompatRequest on stdin, starts the
// suite's reference server as the backend (gRPC over h2c), starts a
// gateway node that serves connectrpc.conformance.v1.ConformanceService
// from its .proto sources to every protocol, and answers with the
// gateway's address on stdout. It runs until SIGTERM or SIGINT.
//
// Flags: -protos, the conformance module's proto directory;
// -referenceserver, the reference server binary. testing/conformance.sh
// builds the suite's runner and reference server (tools of go.mod) and
// this command, and runs the suite; testing/test.sh runs that script.
// By hand, one suite:
//
//	go build -o /tmp/cbin/ connectrpc.com/conformance/cmd/connectconformance connectrpc.com/conformance/cmd/referenceserver ./testing/cmd/conformance-gateway
//	/tmp/cbin/connectconformance --mode server --conf testing/cmd/conformance-gateway/config.yaml --run 'Errors/**' -- \
//	    /tmp/cbin/conformance-gateway -protos $(go list -m -f '{{.Dir}}' connectrpc.com/conformance)/proto -referenceserver /tmp/cbin/referenceserver
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	protos := flag.String("protos", "", "the conformance module's proto directory")
	ref := flag.String("referenceserver", "", "the reference server binary")
	flag.Parse()
	files, err := loadProtos(*protos)
	if err != nil {
		return err
	}
	msg := func(name string) *dynamicpb.Message {
		for _, f := range files {
			if md := f.Messages().ByName(protoreflect.Name(name)); md != nil {
				return dynamicpb.NewMessage(md)
			}
		}
		panic("no message " + name)
	}

	req := msg("ServerCompatRequest")
	if err := readDelimited(os.Stdin, req); err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	useTLS := req.Get(req.Descriptor().Fields().ByName("use_tls")).Bool()

	// The backend: the reference server, speaking gRPC over h2c.
	backendReq := msg("ServerCompatRequest")
	backendReq.Set(backendReq.Descriptor().Fields().ByName("protocol"), protoreflect.ValueOfEnum(2))     // PROTOCOL_GRPC
	backendReq.Set(backendReq.Descriptor().Fields().ByName("http_version"), protoreflect.ValueOfEnum(2)) // HTTP_VERSION_2
	cmd := exec.Command(*ref)
	cmd.Stderr = os.Stderr
	// The suite's reference server is not ours to fix: a race of its own
	// (it is built with -race, testing/conformance.sh) is printed and
	// fails nothing, where the gateway stops at its first.
	cmd.Env = append(os.Environ(), "GORACE=exitcode=0")
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the reference server: %w", err)
	}
	defer func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := writeDelimited(in, backendReq); err != nil {
		return err
	}
	backendResp := msg("ServerCompatResponse")
	if err := readDelimited(out, backendResp); err != nil {
		return fmt.Errorf("reading the reference server's answer: %w", err)
	}
	backend := net.JoinHostPort(backendResp.Get(backendResp.Descriptor().Fields().ByName("host")).String(),
		strconv.FormatUint(backendResp.Get(backendResp.Descriptor().Fields().ByName("port")).Uint(), 10))

	// The gateway, serving the conformance service from its sources.
	var sources []*configv1.ProtoFile
	for _, f := range []string{"service.proto", "config.proto", "suite.proto", "client_compat.proto", "server_compat.proto"} {
		b, err := os.ReadFile(filepath.Join(*protos, "connectrpc/conformance/v1", f))
		if err != nil {
			return err
		}
		sources = append(sources, &configv1.ProtoFile{Name: "connectrpc/conformance/v1/" + f, Content: string(b)})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	l := gateway.Listener{Pool: "public", Listener: ln}
	var pemCert []byte
	if useTLS {
		cert, pemBytes, err := selfSigned()
		if err != nil {
			return err
		}
		l.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		pemCert = pemBytes
	}
	node, err := gateway.New(gateway.Options{
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Listeners: []gateway.Listener{l},
	})
	if err != nil {
		return err
	}
	err = node.Apply(&configv1.Snapshot{
		Version:  "conformance",
		Clusters: []*configv1.Cluster{{Name: "reference", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: backend}}}},
		Services: []*configv1.Service{{
			Id: "conformance", Team: "conformance", Name: "connectrpc.conformance.v1.ConformanceService", Cluster: "reference",
			Auth:        &configv1.RouteAuth{Public: true, Reviewer: "conformance"},
			Timeout:     durationpb.New(30 * time.Second),
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_Sources{Sources: &configv1.ProtoSources{Files: sources}}},
		}},
		RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx) }()

	resp := msg("ServerCompatResponse")
	addr := ln.Addr().(*net.TCPAddr)
	resp.Set(resp.Descriptor().Fields().ByName("host"), protoreflect.ValueOfString("127.0.0.1"))
	resp.Set(resp.Descriptor().Fields().ByName("port"), protoreflect.ValueOfUint32(uint32(addr.Port)))
	if pemCert != nil {
		resp.Set(resp.Descriptor().Fields().ByName("pem_cert"), protoreflect.ValueOfBytes(pemCert))
	}
	if err := writeDelimited(os.Stdout, resp); err != nil {
		return err
	}
	// Serve until the runner stops the process.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		// The runner is done with this server: no drain.
		return nil
	case err := <-done:
		return err
	}
}

// loadProtos compiles the conformance protos.
func loadProtos(dir string) ([]protoreflect.FileDescriptor, error) {
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{dir}})}
	res, err := c.Compile(context.Background(), "connectrpc/conformance/v1/server_compat.proto")
	if err != nil {
		return nil, err
	}
	out := []protoreflect.FileDescriptor{}
	for _, f := range res {
		out = append(out, f)
	}
	return out, nil
}

func readDelimited(r io.Reader, m proto.Message) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return proto.Unmarshal(b, m)
}

func writeDelimited(w io.Writer, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	_, err = w.Write(append(n[:], b...))
	return err
}

// selfSigned makes a certificate for 127.0.0.1 and localhost.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(pemCert, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return cert, pemCert, nil
}
