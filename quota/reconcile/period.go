package reconcile

import (
	"fmt"
	"time"
)

// periodLayout is a billing period's name: the calendar month in UTC.
const periodLayout = "2006-01"

// PeriodOf returns the billing period of t: its calendar month in UTC
// ("2026-12").
func PeriodOf(t time.Time) string { return t.UTC().Format(periodLayout) }

// Bounds returns the start (inclusive) and end (exclusive) of period.
func Bounds(period string) (start, end time.Time, err error) {
	start, err = time.Parse(periodLayout, period)
	if err != nil || start.Format(periodLayout) != period {
		return time.Time{}, time.Time{}, fmt.Errorf("reconcile: period %q is not a month like 2026-12", period)
	}
	return start, start.AddDate(0, 1, 0), nil
}

// next and previous name the periods around period, which must be valid.
func next(period string) string {
	_, end, _ := Bounds(period)
	return PeriodOf(end)
}

func previous(period string) string {
	start, _, _ := Bounds(period)
	return PeriodOf(start.AddDate(0, -1, 0))
}
