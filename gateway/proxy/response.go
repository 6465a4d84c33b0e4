package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/upstream"
)

// respond streams the upstream response to the client and returns the
// outcome for the endpoint.
func (f *Forwarder) respond(w http.ResponseWriter, r *http.Request, t *Target, ctx context.Context, out *outbound, resp *http.Response, grpc bool, outcome upstream.Outcome) upstream.Outcome {
	defer resp.Body.Close()

	h := w.Header()
	var connTokens []string
	if c := resp.Header["Connection"]; len(c) > 0 {
		connTokens = c
	}
	for k, vv := range resp.Header {
		if dropResponseHeader(k) || (connTokens != nil && listedIn(connTokens, k)) {
			continue
		}
		h[k] = vv
	}
	if t.EditResponse != nil {
		t.EditResponse.Apply(h)
	}
	// Announce the trailers the upstream announced, so HTTP/1.1 clients
	// get them too; unannounced ones still go out via TrailerPrefix below.
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h["Trailer"] = []string{strings.Join(names, ", ")}
	}
	// Never flush the header before the first body byte: a gRPC
	// trailers-only response must leave as one HEADERS frame.
	t.status = resp.StatusCode
	t.Record.Answered()
	w.WriteHeader(resp.StatusCode)

	flush := grpc || resp.ContentLength < 0 || isEventStream(resp.Header)
	copyErr, clientErr := f.copyBody(w, resp.Body, flush)

	switch {
	case clientErr != nil:
		// The client stopped reading; the upstream is not to blame.
		return upstream.Canceled
	case copyErr != nil:
		return f.abortStream(w, r, t, ctx, out, grpc, copyErr)
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	return outcome
}

// abortStream handles an upstream that failed after the response started.
// The status is gone, so gRPC callers get an error status in the trailers
// and everyone else a reset stream (or closed connection), never a response
// that looks complete.
func (f *Forwarder) abortStream(w http.ResponseWriter, r *http.Request, t *Target, ctx context.Context, out *outbound, grpc bool, err error) upstream.Outcome {
	if r.Context().Err() != nil {
		return upstream.Canceled
	}
	if _, bodyErr := out.body.failure(); grpc && refusal(bodyErr) != nil {
		// The stream ended because the gateway refused a message of the
		// request (it broke the service's rules): the caller hears why.
		p := refusal(bodyErr)
		t.Record.EndedByGateway(p.Code)
		problem.SetGRPCTrailers(w.Header(), *p)
		return upstream.Canceled
	}
	code := problem.UpstreamError
	if timedOut(ctx) {
		code = problem.UpstreamTimeout
	}
	f.log.Warn("upstream response failed mid-stream", "request_id", t.RequestID, "cluster", t.Cluster.Name(), "code", string(code), "err", err)
	if !grpc {
		t.status = 0 // the answer is cut off: a failure, whatever its status said
		panic(http.ErrAbortHandler)
	}
	t.Record.EndedByGateway(code)
	h := w.Header()
	h[http.TrailerPrefix+"Grpc-Status"] = []string{strconv.Itoa(code.GRPCCode())}
	h[http.TrailerPrefix+"Grpc-Message"] = []string{problem.EncodeGRPCMessage(string(code) + ": the upstream stream failed")}
	return upstream.Failure
}

// copyBody streams src to w through a pooled buffer, flushing after every
// write when the response is a stream. It returns the error that ended the
// copy, split by side: readErr from the upstream, writeErr from the client.
func (f *Forwarder) copyBody(w http.ResponseWriter, src io.Reader, flush bool) (readErr, writeErr error) {
	bp := f.bufs.Get().(*[]byte)
	defer f.bufs.Put(bp)
	buf := *bp
	var flusher http.Flusher
	if flush {
		flusher, _ = w.(http.Flusher)
	}
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil, werr
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}

func isEventStream(h http.Header) bool {
	ct := headerValue(h, "Content-Type")
	return len(ct) >= 17 && strings.EqualFold(ct[:17], "text/event-stream")
}

// isDialError reports whether err means no connection to the upstream could
// be made (refused, unreachable, DNS, handshake), as opposed to a failure on
// an established connection.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}
