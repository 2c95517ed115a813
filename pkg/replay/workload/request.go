// Package workload holds the request traces the replay plays: it reads
// them (CSV traces, Mooncake's JSONL), draws them (the synthetic shapes,
// and ServeGen's production windows) and writes them as CSV. A trace read
// or drawn is a neutral Request of arrival and tokens until the service
// model (ServiceModel) gives each its service time, which makes it the
// Trace a pool serves.
package workload

import (
	"bufio"
	"io"
	"strconv"
	"time"
)

// Request is one request of a trace: when it arrives and how many tokens it
// reads and writes. It says nothing of how a worker serves it; the replay's
// service model does.
type Request struct {
	// Arrival is from the start of the trace.
	Arrival                   time.Duration
	InputTokens, OutputTokens int
}

// The columns of the replay's CSV trace, named as in BurstGPT's CSV files
// (and as the replay's synthetic traces), so that the same flags read all.
const (
	ColumnTimestamp    = "Timestamp"
	ColumnInputTokens  = "Request tokens"
	ColumnOutputTokens = "Response tokens"
)

// CSVWriter writes requests in the replay's CSV trace format one at a time,
// so that a generated trace need not be held in memory whole.
type CSVWriter struct {
	w      *bufio.Writer
	buf    []byte
	header bool
}

// NewCSVWriter writes to w; call Flush at the end.
func NewCSVWriter(w io.Writer) *CSVWriter {
	return &CSVWriter{w: bufio.NewWriter(w)}
}

// Write writes one request, after the header if none was written yet.
// Arrivals are in seconds to the millisecond, as the replay's synthetic
// traces write them.
func (c *CSVWriter) Write(r Request) error {
	if err := c.writeHeader(); err != nil {
		return err
	}
	c.buf = strconv.AppendFloat(c.buf[:0], r.Arrival.Seconds(), 'f', 3, 64)
	c.buf = append(c.buf, ',')
	c.buf = strconv.AppendInt(c.buf, int64(r.InputTokens), 10)
	c.buf = append(c.buf, ',')
	c.buf = strconv.AppendInt(c.buf, int64(r.OutputTokens), 10)
	c.buf = append(c.buf, '\n')
	_, err := c.w.Write(c.buf)
	return err
}

func (c *CSVWriter) writeHeader() error {
	if c.header {
		return nil
	}
	c.header = true
	_, err := c.w.WriteString(ColumnTimestamp + "," + ColumnInputTokens + "," + ColumnOutputTokens + "\n")
	return err
}

// Flush writes the header if no request came, and what is buffered.
func (c *CSVWriter) Flush() error {
	if err := c.writeHeader(); err != nil {
		return err
	}
	return c.w.Flush()
}

// WriteCSV writes requests in the replay's CSV trace format.
func WriteCSV(w io.Writer, reqs []Request) error {
	c := NewCSVWriter(w)
	for _, r := range reqs {
		if err := c.Write(r); err != nil {
			return err
		}
	}
	return c.Flush()
}
