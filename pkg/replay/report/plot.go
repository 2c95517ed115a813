package report

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

var (
	colorDemand  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorWorkers = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colorQueue   = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
)

// Plot draws one panel per policy, one above the other on a shared time
// axis in hours: the demand (requests in flight and waiting, in workers),
// the live workers (starting and draining included), and the queue (in
// workers' worth of slots). The file's extension picks PNG, SVG or PDF.
func Plot(r Report, path string) error {
	var panels [][]*plot.Plot
	for _, res := range r.Policies {
		p, err := panel(res, r.Concurrency)
		if err != nil {
			return err
		}
		panels = append(panels, []*plot.Plot{p})
	}
	if len(panels) == 0 {
		return fmt.Errorf("no policy to plot")
	}
	width, height := 10*vg.Inch, vg.Length(len(panels))*2.2*vg.Inch
	var canvas interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	case ".svg":
		canvas = vgsvg.New(width, height)
	case ".pdf":
		canvas = vgpdf.New(width, height)
	default:
		return fmt.Errorf("plot %s: want a .png, .svg or .pdf file", path)
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	dc := draw.New(canvas)
	aligned := plot.Align(panels, tiles, dc)
	for i := range panels {
		panels[i][0].Draw(aligned[i][0])
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func panel(res sim.Result, concurrency int) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %.1f GPU-h, wait p95 %s, %d failed", res.Name, res.GPUHours, seconds(res.WaitP95), res.FailedRequests)
	p.X.Label.Text = "hours"
	p.Y.Label.Text = "workers"
	p.Y.Min = 0
	demand := make(plotter.XYs, len(res.Series))
	workers := make(plotter.XYs, len(res.Series))
	queue := make(plotter.XYs, len(res.Series))
	peak := 1
	for i, s := range res.Series {
		peak = max(peak, s.Workers)
		h := s.At / 3600
		demand[i] = plotter.XY{X: h, Y: s.Demand}
		workers[i] = plotter.XY{X: h, Y: float64(s.Workers)}
		queue[i] = plotter.XY{X: h, Y: float64(s.Queue) / float64(max(concurrency, 1))}
	}
	for _, l := range []struct {
		name string
		xys  plotter.XYs
		c    color.Color
	}{{"demand", demand, colorDemand}, {"workers", workers, colorWorkers}, {"queue ÷ slots", queue, colorQueue}} {
		line, err := plotter.NewLine(l.xys)
		if err != nil {
			return nil, err
		}
		line.Color = l.c
		line.Width = vg.Points(1)
		p.Add(line)
		p.Legend.Add(l.name, line)
	}
	// A backlog can dwarf the pool; the axis follows the workers, and a
	// taller demand or queue is cut at the top.
	p.Y.Max = 1.5 * float64(peak)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p, nil
}
