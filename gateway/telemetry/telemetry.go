// Package telemetry holds what the gateway attaches to every request so it
// can be followed across systems: the request id and the W3C trace context.
// Metrics, access logs and trace export build on these.
package telemetry
