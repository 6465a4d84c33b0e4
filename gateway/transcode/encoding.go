package transcode

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/portico-gw/portico/gateway/problem"
)

// CheckEncoding refuses a Connect or gRPC-Web call whose request is
// compressed with anything but gzip, which is all the transcoders
// decompress: Unimplemented, as the protocols specify, with the encodings
// the gateway accepts in the protocol's header. (The transcoder's own
// refusal is a bare HTTP 415 that clients read as Unknown.) A gRPC call
// passes untouched: its upstream reads the compression itself. proto is
// r's protocol (problem.ProtocolOf), read once by the caller.
func CheckEncoding(h http.Header, r *http.Request, proto problem.Protocol) *problem.Problem {
	var enc, accept string
	switch proto {
	case problem.ConnectUnary:
		enc, accept = r.Header.Get("Content-Encoding"), "Accept-Encoding"
	case problem.ConnectStream:
		enc, accept = r.Header.Get("Connect-Content-Encoding"), "Connect-Accept-Encoding"
	case problem.GRPCWeb:
		enc, accept = r.Header.Get("Grpc-Encoding"), "Grpc-Accept-Encoding"
	default:
		return nil
	}
	if enc == "" || strings.EqualFold(enc, "identity") || strings.EqualFold(enc, "gzip") {
		return nil
	}
	h.Set(accept, "gzip")
	return &problem.Problem{Code: problem.UnsupportedEncoding, Detail: "request compression " + quoteHeader(enc) + " is not supported: use gzip or identity"}
}

// CheckMediaType refuses a POST to a method's path (a Connect unary call,
// with or without its Connect-Protocol-Version header) whose body is
// neither JSON nor binary proto: 415, as connect-go answers it. (The
// transcoder would take it for a REST call and find no route: a 404.)
func CheckMediaType(r *http.Request, proto problem.Protocol) *problem.Problem {
	if r.Method != http.MethodPost {
		return nil
	}
	switch proto {
	case problem.HTTP, problem.ConnectUnary:
	default:
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if IsUnaryMediaType(ct) {
		return nil
	}
	return &problem.Problem{Code: problem.UnsupportedMedia,
		Detail: "a call of a method is application/json or application/proto, not " + quoteHeader(ct)}
}

// IsUnaryMediaType reports whether ct (a Content-Type, parameters and
// case aside) is one of a Connect unary call's: application/json or
// application/proto.
func IsUnaryMediaType(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	return strings.EqualFold(ct, "application/json") || strings.EqualFold(ct, "application/proto")
}

// quoteHeader quotes a caller's header value for a message, cut short.
func quoteHeader(v string) string {
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return `"` + strings.ToValidUTF8(v, "?") + `"`
}

// UpstreamBody is the body to forward of the gRPC request the transcoder
// made of a call, read from transcoded; client is the caller's own body,
// which transcoded reads. It works around two faults of the transcoder's
// readers (connectrpc.com/vanguard v0.4.0):
//
//   - The envelope reader returns the five bytes of an empty message's
//     prefix together with io.EOF (the empty message's own reader is at its
//     end at once), so the upstream took the request to end there: a call
//     of two empty messages reached the backend as one. The reader carries
//     on correctly when read again, so io.EOF is held back while data
//     comes with it; a real end returns (0, io.EOF) again.
//   - Its readers hold a lock while they wait for the caller's next
//     message, and Close takes the same lock. When the upstream ends a
//     full-duplex stream while the caller still holds its side open, the
//     transport closes the request body, and that Close waited for the
//     caller, who waited for the answer: the call hung. Close closes the
//     caller's body first, which ends the waiting read.
func UpstreamBody(transcoded, client io.ReadCloser) io.ReadCloser {
	return &upstreamBody{transcoded: transcoded, client: client}
}

type upstreamBody struct {
	transcoded, client io.ReadCloser
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.transcoded.Read(p)
	if n > 0 && errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	_ = b.client.Close()
	return b.transcoded.Close()
}

// IsGRPCProto reports whether contentType, a gRPC one, carries proto
// messages: application/grpc or application/grpc+proto.
func IsGRPCProto(contentType string) bool {
	ct, _, _ := strings.Cut(contentType, ";")
	ct = strings.TrimSpace(ct)
	return strings.EqualFold(ct, "application/grpc") || strings.EqualFold(ct, "application/grpc+proto")
}
