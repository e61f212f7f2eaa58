package eval

import (
	"fmt"
	"image/color"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/runtime"
)

// CurvesFile is the figure of the metric against bytes read per decoded
// token (Study, without NoSweeps; the extension follows
// StudyOptions.Figures).
const CurvesFile = "curves.svg"

// curve is one method's points of the bytes figure.
type curve struct {
	label string
	color color.RGBA
	runs  []*Run // finished runs, sorted by FFN bytes
}

// curves returns, for the sweep task, each method's finished runs: Dense
// (the HF folder), γ-Dense over γ (plain and reconstructed), SelectInfer over φ (the Fig. 10 sweep),
// CoreInfer (full file) and GateFirst (the γ file) over φ.
func (s *study) curves() []curve {
	task := s.opt.SweepTask
	pick := func(keep func(p *Run) bool) []*Run {
		var out []*Run
		seen := map[string]bool{}
		for _, p := range s.plan {
			if p.Task != task || !keep(p) || seen[p.Key] {
				continue
			}
			if r := s.planned(p); r != nil && r.FFNBytesPerToken > 0 {
				seen[p.Key] = true
				out = append(out, r)
			}
		}
		sort.SliceStable(out, func(i, j int) bool { return out[i].FFNBytesPerToken < out[j].FFNBytesPerToken })
		return out
	}
	group := func(g, prefix string) func(p *Run) bool {
		return func(p *Run) bool { return p.Group == g && strings.HasPrefix(p.ID, g+"/"+prefix) }
	}
	return []curve{
		{"Dense", color.RGBA{R: 200, G: 60, B: 60, A: 255}, pick(group(GroupTable, "dense/"))},
		{"γ-Dense", color.RGBA{R: 120, G: 120, B: 120, A: 255}, pick(group(GroupCurves, "gamma-dense-"))},
		{"γ-Dense + reconstruction", color.RGBA{R: 30, G: 30, B: 30, A: 255}, pick(group(GroupCurves, "recon-gamma-dense-"))},
		{"SelectInfer", color.RGBA{R: 68, G: 114, B: 196, A: 255}, pick(group(GroupPhi, ""))},
		{"CoreInfer", color.RGBA{R: 237, G: 125, B: 49, A: 255}, pick(group(GroupCurves, "coreinfer-"))},
		{"GateFirst", color.RGBA{R: 84, G: 160, B: 70, A: 255}, pick(group(GroupCurves, "gatefirst-"))},
	}
}

// writeCurves appends the bytes section to b (a table of every curve
// point: method, φ or γ, bytes per decoded token, the metric, the mass
// shares when measured) and draws CurvesFile.
func (s *study) writeCurves(b *strings.Builder) error {
	t, _ := dataset.Lookup(s.opt.SweepTask)
	key, _ := PrimaryMetric(t.Kind)
	cs := s.curves()
	fmt.Fprintf(b, "\n## %s against bytes read per decoded token (%s)\n\n", key, s.opt.SweepTask)
	b.WriteString("Bytes: the weights one decode step reads (attention, FFN rows computed, LM head; GateFirst reads every stored gate row and φ·N up and down rows). Mass (with `--mass`): the share of the stored neurons' Σ|a| over decoded tokens that the computed neurons hold, against the best and random neurons of the same count.\n\n")
	mass := false
	for _, c := range cs {
		for _, r := range c.runs {
			mass = mass || r.Mass != nil
		}
	}
	b.WriteString("| method | γ | φ | FFN bytes/token | bytes/token | " + key + " |")
	if mass {
		b.WriteString(" mass | best | random |")
	}
	b.WriteString("\n| --- | ---: | ---: | ---: | ---: | ---: |")
	if mass {
		b.WriteString(" ---: | ---: | ---: |")
	}
	b.WriteString("\n")
	for _, c := range cs {
		for _, r := range c.runs {
			fmt.Fprintf(b, "| %s | %g | %g | %s | %s | %s |", c.label, r.Gamma, r.Phi,
				runtime.HumanBytes(r.FFNBytesPerToken), runtime.HumanBytes(r.BytesPerToken), formatMetric(r.Metrics[key]))
			switch {
			case !mass:
			case r.Mass != nil:
				fmt.Fprintf(b, " %.3f | %.3f | %.3f |", r.Mass.Mass, r.Mass.Best, r.Mass.Random)
			default:
				b.WriteString(" | | |") // dense: nothing skipped
			}
			b.WriteString("\n")
		}
	}
	file := s.figure(CurvesFile)
	if err := s.plotCurves(filepath.Join(s.opt.Out, file), key, cs); err != nil {
		return err
	}
	fmt.Fprintf(b, "\n![%s](%s)\n", GroupCurves, file)
	return nil
}

// plotCurves draws the metric (log scale for perplexity) against the FFN
// bytes per decoded token in MiB, one line per method; SVG, PNG or PDF by
// path's extension.
func (s *study) plotCurves(path, key string, cs []curve) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s vs FFN bytes per decoded token (%s)\nγ-Dense (plain, reconstructed) over γ; SelectInfer, GateFirst over φ (γ=%g); CoreInfer over φ (γ=1)",
		key, s.opt.SweepTask, s.opt.Gamma)
	p.X.Label.Text = "FFN weight bytes read per decoded token (MiB)"
	p.Y.Label.Text = key
	if key == "perplexity" {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Label.Text = key + " (log scale)"
	}
	p.Add(plotter.NewGrid())
	drawn := 0
	// Dense last, as a larger diamond: it sits on γ-Dense's γ=1 point.
	cs = append(cs[1:len(cs):len(cs)], cs[0])
	for ci, c := range cs {
		var xys plotter.XYs
		for _, r := range c.runs {
			xys = append(xys, plotter.XY{X: float64(r.FFNBytesPerToken) / (1 << 20), Y: r.Metrics[key]})
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		line.Color, points.Color = c.color, c.color
		line.Width = vg.Points(1.5)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(3)
		if ci == len(cs)-1 {
			points.Shape, points.Radius = draw.PyramidGlyph{}, vg.Points(5)
		}
		p.Add(line, points)
		// En spaces keep a renderer's wider font off the thumbnails.
		p.Legend.Add(c.label+"\u2002\u2002", line, points)
		drawn++
	}
	if drawn == 0 {
		s.logf("no finished run for %s: not drawn", path)
		return nil
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	// Margins so that no point sits on the frame, and room for the legend.
	dx := 0.04 * (p.X.Max - p.X.Min)
	p.X.Min, p.X.Max = p.X.Min-dx, p.X.Max+dx
	if key == "perplexity" {
		p.Y.Min, p.Y.Max = p.Y.Min/1.3, p.Y.Max*12
	} else {
		dy := p.Y.Max - p.Y.Min
		p.Y.Min, p.Y.Max = p.Y.Min-0.05*dy, p.Y.Max+0.6*dy
	}
	return savePlot(p, path, 8*vg.Inch, 5*vg.Inch)
}
