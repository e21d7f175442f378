package ui

import "time"

// chart counts grants and waiters in one-second buckets over the last
// chartSpan. It is not safe for concurrent use: the Server guards it.
type chart struct {
	start   int64 // the Unix second of buckets[0]
	grants  [chartLen]int
	waiters [chartLen]int
}

const (
	chartSpan = 15 * time.Minute
	chartLen  = int(chartSpan / time.Second)
)

// advance moves the chart to now's second, carrying the waiter count.
func (c *chart) advance(now time.Time, waiters int) {
	sec := now.Unix()
	if c.start == 0 || sec-(c.start+int64(chartLen)-1) > int64(chartLen) {
		c.start = sec - int64(chartLen) + 1
		c.grants = [chartLen]int{}
		for i := range c.waiters {
			c.waiters[i] = waiters
		}
	}
	for c.start+int64(chartLen)-1 < sec {
		c.start++
		i := int((c.start + int64(chartLen) - 1) % int64(chartLen))
		c.grants[i], c.waiters[i] = 0, waiters
	}
	c.waiters[int(sec%int64(chartLen))] = waiters
}

// grant counts a grant at now.
func (c *chart) grant(now time.Time, waiters int) {
	c.advance(now, waiters)
	c.grants[int(now.Unix()%int64(chartLen))]++
}

// chartJSON is the chart as the API serves it: oldest second first.
type chartJSON struct {
	End     int64 `json:"end"` // the Unix second of the last bucket
	Step    int   `json:"step_seconds"`
	Grants  []int `json:"grants"`
	Waiters []int `json:"waiters"`
}

func (c *chart) json(now time.Time, waiters int) chartJSON {
	c.advance(now, waiters)
	out := chartJSON{End: now.Unix(), Step: 1, Grants: make([]int, chartLen), Waiters: make([]int, chartLen)}
	for k := 0; k < chartLen; k++ {
		i := int((c.start + int64(k)) % int64(chartLen))
		out.Grants[k], out.Waiters[k] = c.grants[i], c.waiters[i]
	}
	return out
}
