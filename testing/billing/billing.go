// Package billing holds the tests that usage is exact from end to end:
// gateway nodes count every call, spool and ship their windows through
// Kafka, the quota service totals them, and the reconciler recovers
// what went missing and closes the billing periods, while the faults a
// fleet meets in production happen to it (a node killed, Kafka away,
// batches delivered twice, the quota service killed, a clock off, a
// window lost by the consumer). The clients count what they saw; the
// tests hold the totals and the billing lines to it, exactly.
//
// The package has no API: its tests are all of it, and nothing imports
// it. They run real processes on loopback: a control plane, nodes (one
// of them a child process, so that it can be SIGKILLed), an in-process
// Kafka broker (testing/kafkatest) and PostgreSQL (testing/pgtest).
package billing
