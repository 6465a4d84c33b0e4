package upstream

import (
	"context"
	"errors"
	"net/http"
)

// Outcome is how a request to an endpoint ended, as far as the endpoint's
// health is concerned. It is passed to [Endpoint.Done].
type Outcome uint8

const (
	// Success is any answer from the endpoint that says nothing bad about
	// it, including 4xx and most 5xx statuses. It resets the endpoint's
	// consecutive failure count.
	Success Outcome = iota
	// Failure is a sign that the endpoint is unwell: the connection could
	// not be made or was refused or reset before a response, the request
	// timed out, or the answer was 502, 503 or 504 (or, for gRPC, a
	// trailers-only UNAVAILABLE). Consecutive failures eject the endpoint.
	Failure
	// Canceled says nothing about the endpoint: the client went away, or the
	// request failed on the gateway's side (for example the client's body
	// was malformed). It only releases the in-flight slot.
	Canceled
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Canceled:
		return "canceled"
	}
	return "unknown"
}

// OutcomeOf classifies the result of one RoundTrip on a cluster's transport.
// ctx is the context the request was sent with: when it was canceled (the
// client went away) the outcome is Canceled, when its deadline passed (the
// route's timeout) it is Failure.
//
// OutcomeOf sees only what RoundTrip returned. The caller knows more and
// should override it: a request body that failed because of the client is
// Canceled; an error while streaming the response body is the caller's call
// (a reset by the upstream is a Failure, a client that stopped reading is
// Canceled).
func OutcomeOf(ctx context.Context, resp *http.Response, err error) Outcome {
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return Canceled
		}
		return Failure
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Failure
	}
	// A gRPC error before any message is a trailers-only response: the
	// status is in the headers. UNAVAILABLE is gRPC's 503.
	if v := resp.Header["Grpc-Status"]; len(v) == 1 && v[0] == "14" {
		return Failure
	}
	return Success
}
