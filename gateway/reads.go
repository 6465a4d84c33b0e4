package gateway

import (
	"net/http"
	"time"
)

// boundReads holds the reads of the request body that the gateway does
// itself, before it forwards (an RPC's first request message, an OpenAPI
// route's body, the request of a REST stream), to timeout from now, the
// call's own timeout: the forward's deadline only starts when it does, and
// without a bound a caller that stops sending would hold the call open as
// long as it liked. A read past the bound fails with os.ErrDeadlineExceeded,
// which problem.ReadFailed answers as DEADLINE_EXCEEDED.
//
// It returns the controller that releaseReads lifts the bound with, or nil
// when w cannot set read deadlines. Release the bound only to forward: a
// refused request keeps it, so that net/http's own read of what is left of
// the body (HTTP/1 reads the rest before it answers) fails at the deadline
// too instead of waiting for a caller that stopped, and net/http closes the
// connection. A connection it keeps gets fresh deadlines for its next
// request.
func boundReads(w http.ResponseWriter, timeout time.Duration) *http.ResponseController {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
		return nil
	}
	return rc
}

// releaseReads lifts the bound boundReads set. On HTTP/1 it clears the
// connection's read deadline, which net/http sets again for the next
// request; on HTTP/2 it stops the stream's timer.
func releaseReads(rc *http.ResponseController) {
	if rc != nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
}
