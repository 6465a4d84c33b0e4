// Package quota is the quota service (`portico quota`): it takes the
// nodes' usage windows off the usage topic into per (caller, product,
// billing period) totals, publishes each node spool's committed
// high-water mark on the control plane's fast lane (so nodes trim their
// spools), reconciles and closes periods, and serves the totals, the
// nodes' sequences, the adjustments and the billing export over the
// QuotaService Connect API.
//
// The pieces are its subpackages: store (the totals and everything
// applied, on PostgreSQL or SQLite), consume (the Kafka consumer group,
// and Local, the in-process delivery of `portico dev`) and reconcile
// (gaps re-sent, totals corrected, periods finalised, billing lines).
// This package wires them and serves the API.
//
// Every call carries a bearer token (internal/svcauth) that the service
// holds as a hash: the quota API is never open. Requests are validated
// (protovalidate) before a handler runs; the store's and the
// reconciler's errors become Connect codes in one place (errors.go),
// and what a client is told never includes the database's text.
//
// Lifecycle: Run(ctx, Options) is the whole role: it opens the store,
// consumes, publishes, reconciles and serves until ctx ends, then stops
// each before the store closes. Embedded (portico dev, tests): Open(ctx,
// Options) returns a Service over the store opts names (or the one given,
// opts.Store); serve Handler (at Paths); (*Service).Run(ctx) consumes,
// publishes and reconciles in the background until ctx ends; Deliver
// applies one usage window message in-process; Close closes what Open
// opened.
package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/gen/portico/quota/v1/quotav1connect"
	"github.com/portico-gw/portico/internal/lanepub"
	"github.com/portico-gw/portico/internal/svchttp"
	"github.com/portico-gw/portico/quota/consume"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
)

// ErrNoTokens is Open's and Run's refusal to serve a quota API no token
// can call: the API is never open.
var ErrNoTokens = errors.New("quota: a platform token is required: the quota API is never open")

// The defaults of Options, which `portico quota`'s flags show.
const (
	DefaultListen   = ":7200"
	DefaultStoreDSN = "sqlite:portico-quota.db"
	// DefaultTopic and DefaultGroup are the usage topic and the consumer
	// group when Kafka is used.
	DefaultTopic = consume.DefaultTopic
	DefaultGroup = consume.DefaultGroup
	// DefaultInterval and DefaultGrace are the reconciler's.
	DefaultInterval = time.Hour
	DefaultGrace    = 2 * time.Minute
)

// source is the quota service's name on the fast lane; the control plane
// takes usage marks from it alone.
const source = "quota"

// Options configure a Service (Open) or the whole role (Run). The zero
// value, with a token, runs on SQLite with no Kafka and no control plane.
type Options struct {
	// Store holds the totals; the caller opens and closes it. Open opens
	// StoreDSN instead when Store is nil.
	Store *store.Store
	// StoreDSN is the store Open opens: postgres://user@host/db or
	// sqlite:PATH; empty means DefaultStoreDSN.
	StoreDSN string
	// TokenHashes are the hex SHA-256 of the tokens callers of the quota
	// API present (svcauth.Hash); empty refuses to start (ErrNoTokens).
	TokenHashes []string

	// Brokers are the Kafka bootstrap addresses of the usage topic;
	// empty means no Kafka consumer: windows arrive through Deliver only
	// (portico dev).
	Brokers []string
	// Topic and Group are the usage topic and the consumer group; empty
	// means DefaultTopic and DefaultGroup.
	Topic, Group string
	// Drop is consume.Options.Drop: a fault hook for tests.
	Drop func(*quotav1.UsageWindow) bool

	// ControlURL is the control plane whose fast lane carries the usage
	// marks and whose usage relay reaches the nodes for re-sends; empty:
	// none (nodes trim nothing, and the reconciler closes periods on
	// the store alone).
	ControlURL string
	// ControlToken is the publisher token the control plane requires (of
	// the fast lane and the usage relay both).
	ControlToken string
	// HTTPClient reaches the control plane; nil: an HTTP/2 client for
	// ControlURL.
	HTTPClient connect.HTTPClient
	// Relay, if set, is the reconciler's way to the nodes instead of the
	// control plane's usage relay at ControlURL.
	Relay reconcile.Relay

	// Interval is the reconciler's period (zero: DefaultInterval), Grace
	// how long after a billing period's end its windows may arrive before
	// it is closed (zero: DefaultGrace).
	Interval, Grace time.Duration
	// WriteOff names nodes whose missing windows the operator gave up on
	// (reconcile.Options.WriteOff).
	WriteOff []string
	// NoReconcileLoop leaves reconciling to Reconcile calls: Run does not
	// reconcile by itself.
	NoReconcileLoop bool
	// Now is the clock; nil: time.Now.
	Now    func() time.Time
	Logger *slog.Logger

	// Listen is the address Run serves on; empty means DefaultListen.
	Listen string
	// Listener, if set, is served by Run instead of binding Listen; Run
	// owns it.
	Listener net.Listener
	// TLSCertFile and TLSKeyFile, if set, make Run serve TLS.
	TLSCertFile, TLSKeyFile string
}

// Service is the quota service. It is safe for concurrent use.
type Service struct {
	opts     Options
	store    *store.Store
	ownStore bool
	log      *slog.Logger
	tokens   map[string]bool // hashes
	pub      *lanepub.Publisher
	rec      *reconcile.Reconciler
	local    *consume.Local
	kafka    *consume.Consumer // nil without brokers

	runOnce sync.Once
}

// Open returns a Service over opts.Store, or over the store at
// opts.StoreDSN, which Close then closes. With opts.Brokers it joins the
// consumer group (consuming starts with Run).
func Open(ctx context.Context, opts Options) (*Service, error) {
	if len(opts.TokenHashes) == 0 {
		return nil, ErrNoTokens
	}
	log := cmp.Or(opts.Logger, slog.Default())
	tokens := map[string]bool{}
	for _, h := range opts.TokenHashes {
		if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
			return nil, errors.New("quota: a token hash must be 64 hex digits (svcauth.Hash)")
		}
		tokens[strings.ToLower(h)] = true
	}
	if opts.HTTPClient == nil && opts.ControlURL != "" {
		opts.HTTPClient = svchttp.Client(opts.ControlURL)
	}
	s := &Service{opts: opts, store: opts.Store, log: log, tokens: tokens}
	if s.store == nil {
		st, err := store.Open(ctx, cmp.Or(opts.StoreDSN, DefaultStoreDSN))
		if err != nil {
			return nil, fmt.Errorf("quota: %w", err)
		}
		s.store, s.ownStore = st, true
	}
	s.pub = lanepub.New(s.store, lanepub.Options{
		Name: source, URL: opts.ControlURL, Token: opts.ControlToken, HTTPClient: opts.HTTPClient, Logger: log,
	})
	relay := opts.Relay
	if relay == nil && opts.ControlURL != "" {
		relay = reconcile.NewRelay(opts.HTTPClient, opts.ControlURL, opts.ControlToken)
	}
	s.rec = reconcile.New(reconcile.Options{
		Store: s.store, Relay: relay, WriteOff: opts.WriteOff, Now: opts.Now, Logger: log,
		Interval: cmp.Or(opts.Interval, DefaultInterval), Grace: cmp.Or(opts.Grace, DefaultGrace),
		Observe: s.observe, Ready: s.ready,
	})
	copts := consume.Options{Brokers: opts.Brokers, Topic: opts.Topic, Group: opts.Group, Store: s.store,
		Drop: opts.Drop, OnApply: s.applied, Logger: log}
	var err error
	if s.local, err = consume.NewLocal(copts); err != nil {
		s.closeStore()
		return nil, fmt.Errorf("quota: %w", err)
	}
	if len(opts.Brokers) > 0 {
		if s.kafka, err = consume.New(copts); err != nil {
			s.closeStore()
			return nil, fmt.Errorf("quota: %w", err)
		}
	}
	return s, nil
}

// ready says whether the windows that waited on the usage topic when the
// service started are in (consume.Consumer.Ready): until they are, the
// reconciler closes no period, since a window of it still unread would
// be booked late into the next one. Windows delivered in-process are in
// when Deliver returns.
func (s *Service) ready(ctx context.Context) error {
	if s.kafka == nil {
		return s.local.Ready(ctx)
	}
	return s.kafka.Ready(ctx)
}

// applied publishes a spool's risen mark at once rather than at the
// publisher's next period.
func (s *Service) applied(_ *quotav1.UsageWindow, a store.Applied) {
	if a.Mark != nil {
		s.pub.Kick()
	}
}

// observe logs what a reconciler run found, when it found anything.
func (s *Service) observe(rep *quotav1.ReconcileReport, err error) {
	if err != nil || rep == nil {
		return // the reconciler logs its failures
	}
	if len(rep.GetGaps()) > 0 || len(rep.GetCorrections()) > 0 || len(rep.GetCounterMismatches()) > 0 || rep.GetFinalised() {
		s.log.Info("quota: reconciled", "period", rep.GetPeriod(), "gaps", len(rep.GetGaps()),
			"corrections", len(rep.GetCorrections()), "counter_mismatches", len(rep.GetCounterMismatches()),
			"finalised", rep.GetFinalised(), "written_off", len(rep.GetWrittenOff()), "blocked", rep.GetBlocked())
	}
}

// Store is the service's store.
func (s *Service) Store() *store.Store { return s.store }

// Deliver applies one usage topic message's value in-process, as the
// Kafka consumer applies the topic's (consume.Local.Deliver): nil once
// it is applied, a duplicate, or skipped as invalid; an error when the
// store failed, and the caller should send it again. It is how a node in
// the same process (portico dev) ships its windows; it works with or
// without a Kafka consumer.
func (s *Service) Deliver(ctx context.Context, value []byte) error {
	return s.local.Deliver(ctx, value)
}

// Stats returns what the Kafka consumer and Deliver did so far, summed.
func (s *Service) Stats() consume.Stats {
	st := s.local.Stats()
	if s.kafka != nil {
		k := s.kafka.Stats()
		st.Applied += k.Applied
		st.Late += k.Late
		st.Duplicates += k.Duplicates
		st.Invalid += k.Invalid
		st.Dropped += k.Dropped
		st.Retries += k.Retries
	}
	return st
}

// Run consumes the usage topic (with Brokers), publishes the usage marks
// (with a control plane) and reconciles (unless NoReconcileLoop) until
// ctx ends, and returns when all of them have stopped. Call it once.
func (s *Service) Run(ctx context.Context) {
	first := false
	s.runOnce.Do(func() { first = true })
	if !first {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.pub.Run(ctx) })
	if !s.opts.NoReconcileLoop {
		wg.Go(func() { s.rec.Loop(ctx) })
	}
	if s.kafka != nil {
		wg.Go(func() {
			if err := s.kafka.Run(ctx); err != nil {
				s.log.Error("quota: the consumer stopped", "err", err)
			}
		})
	}
	wg.Wait()
}

// Close leaves the consumer group and closes the store Open opened.
// Stop Run first.
func (s *Service) Close() error {
	var err error
	if s.kafka != nil {
		err = s.kafka.Close()
	}
	return errors.Join(err, s.closeStore())
}

func (s *Service) closeStore() error {
	if s.ownStore {
		return s.store.Close()
	}
	return nil
}

// Handler serves the QuotaService API.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(quotav1connect.NewQuotaServiceHandler(&api{s},
		connect.WithInterceptors(&authz{s: s}), connect.WithReadMaxBytes(1<<20)))
	return mux
}

// Paths are the http.ServeMux patterns Handler serves, for mounting it
// beside another service on one listener.
func (s *Service) Paths() []string { return []string{"/" + quotav1connect.QuotaServiceName + "/"} }
