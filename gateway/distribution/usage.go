package distribution

import (
	"time"

	"buf.build/go/protovalidate"

	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// clock takes the node's clock offset from the control plane's answer to
// a report, as NTP does with the server's receive and transmit times
// equal (the control plane stamps the report when it reads it and answers
// at once): offset = received − (sent + arrived) / 2. The error is at
// most half the round trip, and nothing if the two legs take as long.
// An answer that does not name a report this node could have sent (no
// times, or a report sent after the answer arrived) is ignored.
func (c *Client) clock(clk *distributionv1.Clock) {
	if c.opts.Usage == nil {
		return
	}
	arrived := c.opts.Now()
	if !clk.GetReportSentAt().IsValid() || !clk.GetReceived().IsValid() {
		c.log.Warn("ignoring a clock answer without its times")
		return
	}
	offset, ok := clockOffset(clk.GetReportSentAt().AsTime(), clk.GetReceived().AsTime(), arrived)
	if !ok {
		c.log.Warn("ignoring a clock answer to a report sent after it arrived", "sent", clk.GetReportSentAt().AsTime(), "arrived", arrived)
		return
	}
	c.opts.Usage.SetClockOffset(offset)
}

// clockOffset is received − (sent + arrived) / 2, written so that it does
// not overflow: received − sent − (arrived − sent) / 2. ok is false when
// arrived is before sent.
func clockOffset(sent, received, arrived time.Time) (time.Duration, bool) {
	rtt := arrived.Sub(sent)
	if rtt < 0 {
		return 0, false
	}
	return received.Sub(sent) - rtt/2, true
}

// resendUsage passes a re-send request to the node's usage, once it is
// valid.
func (c *Client) resendUsage(r *distributionv1.ResendUsage) {
	if c.opts.Usage == nil {
		c.log.Warn("ignoring a usage re-send request: the node counts no usage")
		return
	}
	if err := protovalidate.Validate(r); err != nil {
		c.log.Warn("ignoring an invalid usage re-send request", "err", err)
		return
	}
	c.log.Info("usage re-send requested", "spool", r.GetSpoolId(), "from", r.GetFromSeq(), "to", r.GetToSeq())
	c.opts.Usage.ResendUsage(r)
}
