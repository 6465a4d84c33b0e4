package framing

import "strconv"

// Reason is the kind of ambiguous framing a request head had.
type Reason uint8

const (
	// ContentLengthWithTransferEncoding is a head with both a Content-Length
	// and a Transfer-Encoding field (RFC 9112 §6.1, §6.3 item 3). net/http
	// drops the Content-Length and reads the body as chunked.
	ContentLengthWithTransferEncoding Reason = iota + 1
	// TransferEncodingHTTP10 is Transfer-Encoding on an HTTP/1.0 request
	// (RFC 9112 §6.1). net/http ignores the field and frames the body by
	// Content-Length, or as empty.
	TransferEncodingHTTP10
)

func (r Reason) String() string {
	switch r {
	case ContentLengthWithTransferEncoding:
		return "both Content-Length and Transfer-Encoding"
	case TransferEncodingHTTP10:
		return "Transfer-Encoding in an HTTP/1.0 request"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Error describes the first request head on a connection whose framing was
// ambiguous. Callers branch on it with errors.As; the text is for logs, not
// for clients.
type Error struct {
	Reason Reason
	// Request is the 1-based position of the offending head among the
	// request heads read on the connection. Because net/http reads ahead,
	// it can be a pipelined request after the one being handled.
	Request int
}

func (e *Error) Error() string {
	return "framing: request " + strconv.Itoa(e.Request) + " has " + e.Reason.String()
}
