package distribution

import (
	"context"
	"fmt"

	"github.com/portico-gw/portico/gateway/fastlane"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
)

// LaneVersion returns the fast-lane epoch and version the node holds.
func (c *Client) LaneVersion() (epoch string, version uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.laneEpoch, c.laneVersion
}

// laneSession is one fast-lane stream: hello with the version held, then
// updates, each applied to the Lane and acknowledged. It calls up on
// each message the control plane sends.
func (c *Client) laneSession(ctx context.Context, client distributionv1connect.DistributionServiceClient, up func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := client.FastLane(ctx)
	stopped := closeOnDone(ctx, stream)
	defer close(stopped)
	defer func() { _ = stream.CloseResponse() }()
	epoch, version := c.LaneVersion()
	err := stream.Send(&distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Hello{Hello: &distributionv1.FastLaneHello{
		NodeId: c.opts.NodeID, Epoch: epoch, Version: version,
	}}})
	if err != nil {
		return sendError(err, stream.Receive, up)
	}
	var parts []*configv1.FastLaneEntry
	for {
		resp, err := stream.Receive()
		if err != nil {
			return err
		}
		up()
		u := resp.GetUpdate()
		if u == nil {
			continue
		}
		parts = append(parts, u.GetEntries()...)
		if u.GetMore() {
			continue
		}
		entries := parts
		parts = nil
		ack := &distributionv1.FastLaneAck{Version: u.GetVersion()}
		err = c.opts.Lane.Apply(entries)
		switch {
		case fastlane.Refused(err):
			// The rest is applied: the node holds the version, minus the
			// entries it names, which sending again would not mend.
			ack.Error = err.Error()
			c.log.Error("fast-lane entries refused", "version", u.GetVersion(), "err", err)
		case err != nil:
			return fmt.Errorf("applying fast-lane version %d: %w", u.GetVersion(), err)
		}
		c.mu.Lock()
		c.laneEpoch, c.laneVersion = u.GetEpoch(), u.GetVersion()
		c.mu.Unlock()
		if err := stream.Send(&distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Ack{Ack: ack}}); err != nil {
			return err
		}
		c.log.Debug("fast-lane version applied", "version", u.GetVersion(), "entries", len(entries), "full", u.GetFull())
	}
}
