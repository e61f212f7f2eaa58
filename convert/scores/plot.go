package scores

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// WritePlot draws the report to path, SVG or PNG by its extension (.svg,
// .png): on top, one bar per pair of files (mean overlap over layers) and one
// for all files; below, a heat map of the per-layer overlap (layers × pairs,
// plus an "all" column) with its colour scale. The file is written like
// Write: through a temporary file renamed into place.
func (r *Report) WritePlot(path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("%s: plot format %q not supported, use .svg or .png", path, ext)
	}
	if len(r.Labels) < 2 || len(r.AllPerLayer) == 0 {
		return fmt.Errorf("%s: empty report", path)
	}
	ps := r.pairs()
	names := make([]string, 0, len(ps)+1)
	means := make(plotter.Values, 0, len(ps)+1)
	columns := make([][]float64, 0, len(ps)+1)
	for _, p := range ps {
		names = append(names, r.pairLabel(p))
		means = append(means, r.Pairwise[p[0]][p[1]])
		columns = append(columns, r.PerLayer[p[0]][p[1]])
	}
	if len(r.Labels) > 2 {
		names = append(names, "all")
		means = append(means, r.All)
		columns = append(columns, r.AllPerLayer)
	}
	layers := len(r.AllPerLayer)

	// Bars.
	bars := plot.New()
	bars.Title.Text = fmt.Sprintf("Overlap of the top %s neurons (mean over %d layers)", percent(r.Frac), layers)
	bars.Y.Label.Text = "|A∩B| / |A|"
	bars.Y.Min, bars.Y.Max = 0, 1
	bc, err := plotter.NewBarChart(means, vg.Points(math.Min(40, 400/float64(len(means)))))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	bc.Color = color.RGBA{R: 68, G: 114, B: 196, A: 255}
	bc.LineStyle.Width = 0
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0
	bars.Add(grid, bc)
	bars.NominalX(names...)

	// Heat map with its colour bar.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range columns {
		for _, v := range c {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi-lo < 1e-6 {
		lo = math.Max(0, hi-0.05)
		hi = lo + 0.05
	}
	cm := moreland.ExtendedBlackBody()
	cm.SetMin(lo)
	cm.SetMax(hi)
	heat := plot.New()
	heat.Title.Text = "Per-layer overlap"
	heat.Y.Label.Text = "layer"
	hm := plotter.NewHeatMap(heatGrid(columns), cm.Palette(255))
	hm.Min, hm.Max = lo, hi
	heat.Add(hm)
	heat.NominalX(names...)
	heat.Y.Min, heat.Y.Max = -0.5, float64(layers)-0.5
	heat.X.Min, heat.X.Max = -0.5, float64(len(columns))-0.5

	bar := plot.New()
	bar.HideY()
	bar.X.Label.Text = "overlap"
	bar.Add(&plotter.ColorBar{ColorMap: cm})

	for _, p := range []*plot.Plot{bars, heat} {
		if len(names) > 4 {
			p.X.Tick.Label.Rotation = math.Pi / 6
			p.X.Tick.Label.XAlign = draw.XRight
		}
	}

	w := vg.Length(math.Max(6, 1+0.9*float64(len(names)))) * vg.Inch
	h := 9 * vg.Inch
	var canvas vg.CanvasWriterTo
	if ext == ".svg" {
		canvas = vgsvg.New(w, h)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	dc := draw.New(canvas)
	barH := h * 0.42
	cbH := h * 0.1
	bars.Draw(draw.Crop(dc, 0, 0, h-barH, 0))
	heat.Draw(draw.Crop(dc, 0, 0, cbH, -barH))
	bar.Draw(draw.Crop(dc, w*0.15, -w*0.15, 0, -(h - cbH)))
	return writeAtomic(path, func(out io.Writer) error {
		_, err := canvas.WriteTo(out)
		return err
	})
}

// heatGrid is a heat map grid: columns[c][r] is the value at pair c, layer r.
type heatGrid [][]float64

func (g heatGrid) Dims() (c, r int)   { return len(g), len(g[0]) }
func (g heatGrid) Z(c, r int) float64 { return g[c][r] }
func (g heatGrid) X(c int) float64    { return float64(c) }
func (g heatGrid) Y(r int) float64    { return float64(r) }
