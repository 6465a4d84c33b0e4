package consume

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/segmentio/kafka-go"
)

// readiness tracks whether the group has applied what the usage topic
// held when it was first asked (Consumer.Ready).
type readiness struct {
	client       *kafka.Client
	topic, group string

	mu    sync.Mutex
	ready bool
	ends  map[int]int64 // partition → the offset to reach; nil: not read yet
}

// Ready returns nil once the consumer group has applied every message
// the usage topic held when Ready was first asked (on the quota service,
// by the reconciler at its first close, just after the start): for
// every partition, the group's committed offset has reached the end the
// partition had then. Since a message is committed only after the store
// took it, that is the topic read to its end and applied, whichever
// member of the group read it. Until then it returns an error saying how
// far the group is from there, or why that is not known (the brokers do
// not answer); once it returned nil it always does. A topic that does
// not exist yet holds nothing, and is ready.
//
// kafka-go's Reader.Lag and ReadLag are not available with a consumer
// group, and Stats().Lag is one figure for all partitions, so Ready asks
// the brokers (ListOffsets, OffsetFetch).
func (c *Consumer) Ready(ctx context.Context) error { return c.ready.check(ctx) }

func (r *readiness) check(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		return nil
	}
	if r.ends == nil {
		ends, err := r.read(ctx)
		if err != nil {
			return fmt.Errorf("consume: what waits on the usage topic %s is not known yet: %w", r.topic, err)
		}
		r.ends = ends
	}
	if len(r.ends) > 0 {
		parts := slices.Sorted(maps.Keys(r.ends))
		resp, err := r.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: r.group, Topics: map[string][]int{r.topic: parts}})
		if err == nil {
			err = resp.Error
		}
		if err != nil {
			return fmt.Errorf("consume: the group %s's offsets on the usage topic are not known yet: %w", r.group, err)
		}
		committed := map[int]int64{}
		for _, p := range resp.Topics[r.topic] {
			if p.Error != nil {
				return fmt.Errorf("consume: the group %s's offset of partition %d is not known yet: %w", r.group, p.Partition, p.Error)
			}
			committed[p.Partition] = p.CommittedOffset
		}
		var behind []string
		var n int64
		for _, p := range parts {
			if c, ok := committed[p]; ok && c >= r.ends[p] {
				delete(r.ends, p)
				continue
			}
			behind = append(behind, fmt.Sprint(p))
			n += r.ends[p] - max(committed[p], 0)
		}
		if len(behind) > 0 {
			return fmt.Errorf("consume: the usage topic %s held windows when the quota service started that are not all applied yet (partitions %s, up to %d messages)",
				r.topic, strings.Join(behind, ", "), n)
		}
	}
	r.ready = true
	return nil
}

// read returns the end of every partition of the topic that holds
// messages.
func (r *readiness) read(ctx context.Context) (map[int]int64, error) {
	md, err := r.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{r.topic}})
	if err != nil {
		return nil, err
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != r.topic {
			continue
		}
		if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
			return map[int]int64{}, nil // no window was ever produced
		}
		if t.Error != nil {
			return nil, t.Error
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return map[int]int64{}, nil
	}
	resp, err := r.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{r.topic: reqs}})
	if err != nil {
		return nil, err
	}
	ends := map[int]int64{}
	for _, p := range resp.Topics[r.topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", p.Partition, p.Error)
		}
		if p.LastOffset > p.FirstOffset {
			ends[p.Partition] = p.LastOffset
		}
	}
	return ends, nil
}
