package scores

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
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
	// Half a column of room on each side, so the first and last bars stand
	// clear of the edges (the bars' width is in points, not data units).
	bars.X.Min, bars.X.Max = -0.5, float64(len(means))-0.5

	// Heat map with its colour bar, and each cell's value written in it
	// when the cells are large enough to hold one.
	cm, lo, hi := heatScale(columns)
	heat := plot.New()
	heat.Title.Text = "Per-layer overlap"
	heat.Y.Label.Text = "layer"
	hm := plotter.NewHeatMap(heatGrid(columns), cm.Palette(255))
	hm.Min, hm.Max = cm.Min(), cm.Max()
	heat.Add(hm)
	if layers <= maxValueRows && len(columns) <= maxValueColumns {
		labels, err := cellLabels(columns, cm, layers)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		heat.Add(labels)
	}
	heat.NominalX(names...)
	heat.Y.Min, heat.Y.Max = -0.5, float64(layers)-0.5
	heat.X.Min, heat.X.Max = -0.5, float64(len(columns))-0.5
	heat.Y.Tick.Marker = layerTicks(layers)

	// The colour bar is drawn as rectangles: plotter.ColorBar embeds a PNG
	// that the SVG backend labels image/jpg, which SVG renderers (rsvg)
	// refuse to draw.
	bar := plot.New()
	bar.HideY()
	bar.X.Label.Text = "overlap"
	bar.Add(colorBar{cm: cm, steps: 128})
	bar.X.Min, bar.X.Max = lo, hi

	w := vg.Length(math.Max(6, 1+0.9*float64(len(names)))) * vg.Inch
	// Labels wider than their column are turned, so neighbours do not run
	// into each other.
	col := (w - 1.2*vg.Inch) / vg.Length(len(names))
	for _, p := range []*plot.Plot{bars, heat} {
		widest := vg.Length(0)
		for _, n := range names {
			widest = max(widest, p.X.Tick.Label.Width(n))
		}
		if widest > 0.9*col {
			p.X.Tick.Label.Rotation = math.Pi / 6
			p.X.Tick.Label.XAlign = draw.XRight
		}
	}

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
	// Margins: the last column would touch the right edge, the y labels the
	// left one.
	left, right := vg.Points(6), -vg.Inch/4
	gap := vg.Inch / 6 // between the panels: tick labels, then a title
	bars.Draw(draw.Crop(dc, left, right, h-barH, 0))
	heat.Draw(draw.Crop(dc, left, right, cbH+gap, -(barH + gap)))
	bar.Draw(draw.Crop(dc, w*0.15, -w*0.15, 0, -(h - cbH)))
	return writeAtomic(path, func(out io.Writer) error {
		_, err := canvas.WriteTo(out)
		return err
	})
}

// The heat map writes each cell's value in it up to this many layers and
// columns (above, the cells are too small to read one).
const (
	maxValueRows    = 40
	maxValueColumns = 16
)

// heatScale returns the heat map's colour map and the range of the values
// [lo, hi] (widened to 0.05 when they are all equal). The map is the
// extended black-body one (black, blue, red, yellow, white), ranged so that
// hi falls on yellow: at full range the highest cell was drawn near-white, as
// if it were empty.
func heatScale(columns [][]float64) (cm palette.ColorMap, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, c := range columns {
		for _, v := range c {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi-lo < 1e-6 {
		lo = math.Max(0, hi-0.05)
		hi = lo + 0.05
	}
	cm = moreland.ExtendedBlackBody()
	cm.SetMin(lo)
	cm.SetMax(hi + (hi-lo)/heatHeadroom)
	return cm, lo, hi
}

// heatHeadroom: the colour map runs (hi − lo)/heatHeadroom past hi, its
// last fifth (yellow to white) left unused.
const heatHeadroom = 4

// cellLabels writes each cell's value (two decimals) at its centre, white on
// the dark half of the colour map and black on the light half.
func cellLabels(columns [][]float64, cm palette.ColorMap, layers int) (*plotter.Labels, error) {
	var xys plotter.XYLabels
	var vals []float64
	for c, col := range columns {
		for r, v := range col {
			xys.XYs = append(xys.XYs, plotter.XY{X: float64(c), Y: float64(r)})
			xys.Labels = append(xys.Labels, strconv.FormatFloat(v, 'f', 2, 64))
			vals = append(vals, v)
		}
	}
	l, err := plotter.NewLabels(xys)
	if err != nil {
		return nil, err
	}
	size := vg.Points(9)
	if layers > 20 {
		size = vg.Points(6)
	}
	for i, v := range vals {
		st := &l.TextStyle[i]
		st.Font.Size = size
		st.XAlign, st.YAlign = draw.XCenter, draw.YCenter
		st.Color = color.White
		if (v-cm.Min())/(cm.Max()-cm.Min()) > 0.5 {
			st.Color = color.Black
		}
	}
	return l, nil
}

// heatGrid is a heat map grid: columns[c][r] is the value at pair c, layer r.
type heatGrid [][]float64

func (g heatGrid) Dims() (c, r int)   { return len(g), len(g[0]) }
func (g heatGrid) Z(c, r int) float64 { return g[c][r] }
func (g heatGrid) X(c int) float64    { return float64(c) }
func (g heatGrid) Y(r int) float64    { return float64(r) }

// layerTicks marks each layer of the heat map at its row's centre, labelled
// with its index (model.layers.N), every layer up to 16 and evenly spaced
// labels above.
type layerTicks int

func (n layerTicks) Ticks(_, _ float64) []plot.Tick {
	step := max(1, (int(n)+15)/16)
	ticks := make([]plot.Tick, int(n))
	for l := range ticks {
		ticks[l].Value = float64(l)
		if l%step == 0 {
			ticks[l].Label = strconv.Itoa(l)
		}
	}
	return ticks
}

// colorBar draws a colour map's range [Min, Max] as steps filled
// rectangles along x (y from 0 to 1), a vector colour bar.
type colorBar struct {
	cm    palette.ColorMap
	steps int
}

func (b colorBar) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	lo, hi := b.cm.Min(), b.cm.Max()
	d := (hi - lo) / float64(b.steps)
	for i := range b.steps {
		v := lo + (float64(i)+0.5)*d
		col, err := b.cm.At(v)
		if err != nil {
			continue
		}
		x0, x1 := trX(lo+float64(i)*d), trX(min(hi, lo+float64(i+1)*d+d/2)) // overlap half a step: no seams
		y0, y1 := trY(0), trY(1)
		c.FillPolygon(col, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
	}
}

func (b colorBar) DataRange() (xmin, xmax, ymin, ymax float64) {
	return b.cm.Min(), b.cm.Max(), 0, 1
}
