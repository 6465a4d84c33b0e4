package demo

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

// maxAddedOrders bounds the orders a store keeps besides its seeds, so that a
// benchmark creating orders for hours runs in bounded memory.
const maxAddedOrders = 10_000

// firstOrderNumber is the number of the first seed; added orders count on
// from the last seed.
const firstOrderNumber = 1001

var (
	errOrderNotFound = errors.New("not found")
	errOrderExists   = errors.New("already exists")
)

// store is the in-memory order store. It is safe for concurrent use. Orders
// go in and come out as copies, so callers may keep and change what they
// pass or get.
type store struct {
	mu     sync.Mutex
	orders map[string]*demov1.Order
	// customers holds the ids of each customer's orders, oldest first.
	customers map[string][]string
	// added holds the ids of added orders, oldest first, for eviction.
	added []string
	next  int
}

// newStore returns a store holding the seed orders.
func newStore(now time.Time) *store {
	s := &store{
		orders:    make(map[string]*demov1.Order),
		customers: make(map[string][]string),
		next:      firstOrderNumber,
	}
	seeds := []struct {
		customer string
		status   demov1.OrderStatus
		items    []*demov1.LineItem
	}{
		{"c-42", demov1.OrderStatus_ORDER_STATUS_PENDING, []*demov1.LineItem{
			{Sku: "WIDGET-1", Quantity: 2, UnitPriceCents: 1250},
			{Sku: "GADGET-2", Quantity: 1, UnitPriceCents: 4999},
		}},
		{"c-42", demov1.OrderStatus_ORDER_STATUS_PAID, []*demov1.LineItem{
			{Sku: "GIZMO-3", Quantity: 3, UnitPriceCents: 300},
		}},
		{"c-7", demov1.OrderStatus_ORDER_STATUS_SHIPPED, []*demov1.LineItem{
			{Sku: "WIDGET-1", Quantity: 10, UnitPriceCents: 1100},
		}},
	}
	for i, seed := range seeds {
		id := s.newIDLocked()
		s.orders[id] = &demov1.Order{
			OrderId:    id,
			CustomerId: seed.customer,
			Items:      seed.items,
			Status:     seed.status,
			TotalCents: total(seed.items),
			CreateTime: timestamppb.New(now.Add(time.Duration(i-len(seeds)) * time.Hour)),
		}
		s.customers[seed.customer] = append(s.customers[seed.customer], id)
	}
	return s
}

// get returns a copy of the order with the given id, or errOrderNotFound.
func (s *store) get(id string) (*demov1.Order, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[id]
	if !ok {
		return nil, fmt.Errorf("order %q: %w", id, errOrderNotFound)
	}
	return proto.CloneOf(o), nil
}

// add stores a copy of o and returns the stored order. An empty order id is
// replaced by a fresh one; an id already in use is errOrderExists. The caller
// has validated o and filled in everything else. Past maxAddedOrders, the
// oldest added order is forgotten.
func (s *store) add(o *demov1.Order) (*demov1.Order, error) {
	o = proto.CloneOf(o)
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.OrderId == "" {
		o.OrderId = s.newIDLocked()
	} else if _, ok := s.orders[o.OrderId]; ok {
		return nil, fmt.Errorf("order %q: %w", o.OrderId, errOrderExists)
	}
	s.orders[o.OrderId] = o
	s.customers[o.CustomerId] = append(s.customers[o.CustomerId], o.OrderId)
	s.added = append(s.added, o.OrderId)
	if len(s.added) > maxAddedOrders {
		s.evictLocked()
	}
	return proto.CloneOf(o), nil
}

// evictLocked forgets the oldest added order.
func (s *store) evictLocked() {
	id := s.added[0]
	s.added[0] = ""
	s.added = s.added[1:]
	o := s.orders[id]
	delete(s.orders, id)
	// The oldest added order is the oldest added one of its customer too, so
	// it follows at most the customer's seeds: find it from the front and
	// shift that short prefix over it rather than the long tail.
	ids := s.customers[o.CustomerId]
	i := slices.Index(ids, id)
	if i < 0 {
		return // not reached: every stored id is in its customer's list
	}
	copy(ids[1:i+1], ids[:i])
	ids[0] = ""
	if ids = ids[1:]; len(ids) == 0 {
		delete(s.customers, o.CustomerId)
	} else {
		s.customers[o.CustomerId] = ids
	}
}

// setStatus changes the status of an order and returns the changed order, or
// errOrderNotFound.
func (s *store) setStatus(id string, status demov1.OrderStatus) (*demov1.Order, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[id]
	if !ok {
		return nil, fmt.Errorf("order %q: %w", id, errOrderNotFound)
	}
	o.Status = status
	return proto.CloneOf(o), nil
}

// orderState is what a watch needs to know of one order.
type orderState struct {
	id     string
	status demov1.OrderStatus
}

// customerOrders returns the state of each of a customer's orders, oldest
// first.
func (s *store) customerOrders(customer string) []orderState {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.customers[customer]
	states := make([]orderState, len(ids))
	for i, id := range ids {
		states[i] = orderState{id: id, status: s.orders[id].Status}
	}
	return states
}

// customerOrderCopies returns copies of a customer's orders, oldest first.
func (s *store) customerOrderCopies(customer string) []*demov1.Order {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.customers[customer]
	out := make([]*demov1.Order, 0, len(ids))
	for _, id := range ids {
		if o, ok := s.orders[id]; ok {
			out = append(out, proto.CloneOf(o))
		}
	}
	return out
}

// customerOrder returns the state of the customer's (n mod count)th order,
// oldest first, so that a watch can walk the orders without copying them
// all on every step. It reports false if the customer has no orders.
func (s *store) customerOrder(customer string, n uint64) (orderState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.customers[customer]
	if len(ids) == 0 {
		return orderState{}, false
	}
	id := ids[n%uint64(len(ids))]
	return orderState{id: id, status: s.orders[id].Status}, true
}

// newIDLocked returns the next free generated id. Imported orders may have
// taken numbers ahead of the counter, so it skips ids in use.
func (s *store) newIDLocked() string {
	for {
		id := "o-" + strconv.Itoa(s.next)
		s.next++
		if _, ok := s.orders[id]; !ok {
			return id
		}
	}
}

// Bounds that keep the total of a valid order far below math.MaxInt64.
const (
	maxLineItems      = 100
	maxQuantity       = 1000
	maxUnitPriceCents = 1_000_000_000_000
)

// validateOrder checks the fields a caller provides for a new order, with the
// rules of orders.proto. The gateway checks requests with protovalidate too,
// but the service must be safe on its own. An empty order id passes: the
// store assigns one.
func validateOrder(o *demov1.Order) error {
	if id := o.GetOrderId(); id != "" && !validID("o-", id) {
		return fmt.Errorf("order_id %q does not match o-[0-9a-z]{1,32}", id)
	}
	if !validID("c-", o.GetCustomerId()) {
		return fmt.Errorf("customer_id %q does not match c-[0-9a-z]{1,32}", o.GetCustomerId())
	}
	if n := len(o.GetItems()); n == 0 || n > maxLineItems {
		return fmt.Errorf("an order has 1..%d items, got %d", maxLineItems, n)
	}
	for i, item := range o.GetItems() {
		switch {
		case !validSKU(item.GetSku()):
			return fmt.Errorf("items[%d]: sku %q does not match [A-Z0-9-]{3,32}", i, item.GetSku())
		case item.GetQuantity() <= 0 || item.GetQuantity() > maxQuantity:
			return fmt.Errorf("items[%d]: quantity must be in 1..%d, got %d", i, maxQuantity, item.GetQuantity())
		case item.GetUnitPriceCents() < 0 || item.GetUnitPriceCents() > maxUnitPriceCents:
			return fmt.Errorf("items[%d]: unit_price_cents must be in 0..%d, got %d", i, int64(maxUnitPriceCents), item.GetUnitPriceCents())
		}
	}
	if !definedStatus(o.GetStatus()) {
		return fmt.Errorf("status %d is not defined", o.GetStatus())
	}
	return nil
}

// total returns the total of items that passed validateOrder, whose bounds
// rule out overflow.
func total(items []*demov1.LineItem) int64 {
	var sum int64
	for _, item := range items {
		sum += int64(item.GetQuantity()) * item.GetUnitPriceCents()
	}
	return sum
}

// validID reports whether s is prefix followed by 1 to 32 of [0-9a-z], the
// shape of order and customer ids.
func validID(prefix, s string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) == 0 || len(rest) > 32 {
		return false
	}
	for _, r := range rest {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') {
			return false
		}
	}
	return true
}

// validSKU reports whether s is 3 to 32 of [A-Z0-9-], the shape of a SKU in
// orders and in the inventory.
func validSKU(s string) bool {
	if len(s) < 3 || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'A' || r > 'Z') && r != '-' {
			return false
		}
	}
	return true
}

// definedStatus reports whether s is a value of the OrderStatus enum.
func definedStatus(s demov1.OrderStatus) bool {
	_, ok := demov1.OrderStatus_name[int32(s)]
	return ok
}
