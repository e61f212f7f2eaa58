package eval

import (
	"bytes"
	"fmt"
	"github.com/selectinfer/sinf/runtime"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/selectinfer/sinf/convert/dataset"
)

// metricShort names metrics in table headers.
var metricShort = map[string]string{
	"exact_match": "EM", "f1": "F1", "accuracy": "Acc", "bleu": "BLEU",
	"rouge1": "R-1", "rouge2": "R-2", "rougeL": "R-L", "perplexity": "PPL ↓",
}

// Figures written by Study, by group.
var figures = []struct{ group, file, col, param, title string }{
	{GroupPhi, "fig10_phi.svg", "φ", "φ (fraction of N computed per decode step)", "Fig. 10: %s vs φ (SelectInfer, γ=%g, δ=min(%g, φ), %s)"},
	{GroupGamma, "fig10_gamma.svg", "γ", "γ (fraction of N stored)", "Fig. 10: %s vs γ (SelectInfer, φ=%g, δ=%g, %s)"},
	{GroupDelta, "fig9_delta.svg", "δ", "δ (fraction of N stored as base)", "Fig. 9: %s vs δ (SelectInfer, γ=%g, φ=%g, %s)"},
	{GroupLayers, "fig8_layers.svg", "sliced layers", "sliced layer range", "Fig. 8: %s vs sliced layers (SelectInfer, γ=%g, δ=%g, φ=%g, %s)"},
}

// planned returns the finished stored run of the planned run p, or nil.
func (s *study) planned(p *Run) *Run {
	_, r := s.find(p.ID)
	if finished(r) && r.Key == p.Key {
		return r
	}
	return nil
}

func (s *study) tableRun(rowID, task string) *Run { return s.groupRun(GroupTable, rowID, task) }

// groupRun returns the finished run of a group's row on a task, or nil.
func (s *study) groupRun(group, rowID, task string) *Run {
	for _, p := range s.plan {
		if p.Group == group && p.ID == group+"/"+rowID+"/"+task {
			return s.planned(p)
		}
	}
	return nil
}

func (s *study) rowLabel(id, label string) string {
	o := s.opt
	switch id {
	case "gamma-dense":
		return fmt.Sprintf("%s (γ=%g)", label, o.Gamma)
	case "selectinfer":
		return fmt.Sprintf("%s (γ=%g, δ=%g, φ=%g)", label, o.Gamma, o.Delta, o.Phi)
	case "coreinfer":
		return fmt.Sprintf("%s (φ=%g)", label, o.Phi)
	case "coreinfer-selective", "coreinfer-random":
		return fmt.Sprintf("%s (γ=%g, φ=%g)", label, o.Gamma, o.Phi)
	case "gatefirst", "gatefirst-recon":
		return fmt.Sprintf("%s (γ=%g, φ=%g: SelectInfer's bytes per token)", label, o.Gamma, runtime.GateFirstPhi(o.Gamma, o.Phi))
	case "oracle", "oracle-recon":
		return fmt.Sprintf("%s (γ=%g, φ=%g)", label, o.Gamma, runtime.GateFirstPhi(o.Gamma, o.Phi))
	case "gamma-dense-rbias", "gamma-dense-rrefit", "gamma-dense-rboth":
		return fmt.Sprintf("%s (γ=%g)", label, o.Gamma)
	}
	return label
}

func formatMetric(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%.2f", v)
}

func cell(r *Run) string {
	if r == nil {
		return "–"
	}
	var parts []string
	for _, k := range MetricKeys(r.Kind) {
		parts = append(parts, formatMetric(r.Metrics[k]))
	}
	return strings.Join(parts, " / ")
}

func header(task string) string {
	t, _ := dataset.Lookup(task)
	var names []string
	for _, k := range MetricKeys(t.Kind) {
		names = append(names, metricShort[k])
	}
	return task + " (" + strings.Join(names, " / ") + ")"
}

func (s *study) limitText() string {
	if s.opt.Limit <= 0 {
		return "all examples"
	}
	return fmt.Sprintf("first %d examples (perplexity: windows)", s.opt.Limit)
}

// writeReport writes table.md and the figures from the finished runs.
func (s *study) writeReport() error {
	o := s.opt
	var b strings.Builder
	name := filepath.Base(filepath.Clean(o.Model))
	fmt.Fprintf(&b, "# SelectInfer study: %s\n\n", name)
	fmt.Fprintf(&b, "Model `%s` (%d layers, N = %d), sliced layers [%d, %d), γ = %g, δ = %g, φ = %g, α = %g; %s per task; greedy decoding. Written by `sinf study` from results.json.\n\n",
		o.Model, s.cfg.Layers, s.cfg.Intermediate, s.lo, s.hi, o.Gamma, o.Delta, o.Phi, o.Alpha, s.limitText())

	b.WriteString("## Task metrics (layout of the paper's Tables 3 and 4)\n\n")
	b.WriteString("| Method |")
	for _, t := range o.Tasks {
		b.WriteString(" " + header(t) + " |")
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(o.Tasks)) + "\n")
	for _, row := range tableRows {
		b.WriteString("| " + s.rowLabel(row.id, row.label) + " |")
		for _, t := range o.Tasks {
			b.WriteString(" " + cell(s.tableRun(row.id, t)) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\nEM / F1: SQuAD exact match and F1 ×100; Acc: accuracy ×100 (lowest summed NLL); BLEU: corpus BLEU; R-1 / R-2 / R-L: mean ROUGE F ×100; PPL: perplexity (lower is better). `–`: not run or failed.\n\n")

	if len(o.DTypes) > 0 {
		b.WriteString("## Stored dtype (layout of the paper's Table 4: γ-dense against quantized)\n\n")
		b.WriteString("| Method | file size |")
		for _, t := range o.Tasks {
			b.WriteString(" " + header(t) + " |")
		}
		b.WriteString("\n| --- | ---: |" + strings.Repeat(" ---: |", len(o.Tasks)) + "\n")
		type row struct {
			label string
			runs  []*Run
		}
		var rows []row
		for _, id := range []string{"dense", "gamma-dense", "selectinfer"} {
			var r row
			for _, t := range o.Tasks {
				r.runs = append(r.runs, s.tableRun(id, t))
			}
			for _, tr := range tableRows {
				if tr.id == id {
					r.label = s.rowLabel(id, tr.label) + ", checkpoint dtype"
				}
			}
			rows = append(rows, r)
		}
		for _, d := range o.DTypes {
			for _, dr := range dtypeRows {
				r := row{label: s.rowLabel(dr.id, dr.label) + ", " + d.String()}
				for _, t := range o.Tasks {
					r.runs = append(r.runs, s.groupRun(GroupDType, dr.id+"-"+dtypeID(d), t))
				}
				rows = append(rows, r)
			}
		}
		for _, r := range rows {
			size := "–"
			for _, run := range r.runs {
				if run != nil {
					size = runtime.HumanBytes(run.FileBytes)
				}
			}
			fmt.Fprintf(&b, "| %s | %s |", r.label, size)
			for _, run := range r.runs {
				b.WriteString(" " + cell(run) + " |")
			}
			b.WriteString("\n")
		}
		var names []string
		for _, d := range o.DTypes {
			names = append(names, d.String())
		}
		fmt.Fprintf(&b, "\nDense, %s: every neuron in a γ=1 file of that dtype (Q8_0, Q4_0, …: GGML's blocks, spec §5.2; Q4_K_M, Q5_K_M: llama-quantize's mixes, spec §5.3), run densely. The first three rows are the checkpoint's dtype.\n\n", strings.Join(names, " / "))
	}

	b.WriteString("## Peak memory (layout of the paper's Table 5)\n\n")
	b.WriteString("| Method | weights | file size | KV cache | file + KV cache | peak RSS (max over tasks) |\n| --- | --- | ---: | ---: | ---: | ---: |\n")
	var memSource string
	for _, row := range tableRows {
		var file string
		var fileBytes, kv, rss int64
		found := false
		for _, t := range o.Tasks {
			r := s.tableRun(row.id, t)
			if r == nil {
				continue
			}
			found = true
			file = filepath.Base(r.File)
			fileBytes, kv = r.FileBytes, max(kv, r.KVBytes)
			rss = max(rss, r.PeakMemoryBytes)
			if memSource == "" {
				memSource = r.MemorySource
			}
		}
		if !found {
			fmt.Fprintf(&b, "| %s | – | – | – | – | – |\n", s.rowLabel(row.id, row.label))
			continue
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s | %s |\n", s.rowLabel(row.id, row.label), file, runtime.HumanBytes(fileBytes), runtime.HumanBytes(kv), runtime.HumanBytes(fileBytes+kv), runtime.HumanBytes(rss))
	}
	if memSource != "" {
		fmt.Fprintf(&b, "\nKV cache: 2 · layers · context · kv_heads · head_dim · 4 bytes for the run's context. Peak RSS: %s.\n", memSource)
	}

	if !o.NoSweeps {
		t, _ := dataset.Lookup(o.SweepTask)
		key, higher := PrimaryMetric(t.Kind)
		dir := "higher is better"
		if !higher {
			dir = "lower is better"
		}
		fmt.Fprintf(&b, "\n## Sweeps on %s (%s, %s)\n", o.SweepTask, key, dir)
		if dense := s.tableRun("dense", o.SweepTask); dense != nil {
			fmt.Fprintf(&b, "\nDense reference: %s = %s.\n", key, formatMetric(dense.Metrics[key]))
		}
		for _, f := range figures {
			pts := s.sweep(f.group)
			title := s.figTitle(f.group, f.title, key)
			fmt.Fprintf(&b, "\n### %s\n\n", title)
			fmt.Fprintf(&b, "| %s | file | %s |\n| --- | --- | ---: |\n", f.col, key)
			for _, p := range pts {
				v := "–"
				if p.run != nil {
					v = formatMetric(p.run.Metrics[key])
				}
				fmt.Fprintf(&b, "| %s | `%s` | %s |\n", p.label, filepath.Base(p.plan.File), v)
			}
			file := s.figure(f.file)
			if err := s.plot(f.group, filepath.Join(o.Out, file), f.param, title, key, pts); err != nil {
				return err
			}
			fmt.Fprintf(&b, "\n![%s](%s)\n", f.group, file)
		}
		if err := s.writeCurves(&b); err != nil {
			return err
		}
	}
	return WriteAtomic(filepath.Join(o.Out, "table.md"), []byte(b.String()))
}

// figure returns the file name of a figure in the study's format
// (StudyOptions.Figures).
func (s *study) figure(name string) string {
	if s.opt.Figures == "" {
		return name
	}
	return strings.TrimSuffix(name, filepath.Ext(name)) + "." + s.opt.Figures
}

func (s *study) figTitle(group, format, key string) string {
	o := s.opt
	switch group {
	case GroupPhi:
		return fmt.Sprintf(format, key, o.Gamma, o.Delta, o.SweepTask)
	case GroupGamma:
		return fmt.Sprintf(format, key, o.Phi, o.Delta, o.SweepTask)
	case GroupDelta:
		return fmt.Sprintf(format, key, o.Gamma, o.Phi, o.SweepTask)
	}
	return fmt.Sprintf(format, key, o.Gamma, o.Delta, o.Phi, o.SweepTask)
}

type sweepPoint struct {
	x     float64
	label string
	plan  *Run
	run   *Run // nil when not finished
}

func (s *study) sweep(group string) []sweepPoint {
	var pts []sweepPoint
	for _, p := range s.plan {
		if p.Group != group {
			continue
		}
		pt := sweepPoint{label: strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(p.Row, "φ="), "γ="), "δ="), plan: p, run: s.planned(p)}
		switch group {
		case GroupPhi:
			pt.x = p.Phi
		case GroupGamma:
			pt.x = p.Gamma
		case GroupDelta:
			pt.x = p.Delta
		default:
			pt.x = float64(len(pts))
		}
		pts = append(pts, pt)
	}
	return pts
}

// plot draws one sweep (SVG, or by path's extension PNG or PDF): the metric against the parameter (layer ranges as
// named positions) and the dense model's value as a dashed line.
func (s *study) plot(group, path, xlabel, title, key string, pts []sweepPoint) error {
	var xys plotter.XYs
	for _, p := range pts {
		if p.run != nil {
			xys = append(xys, plotter.XY{X: p.x, Y: p.run.Metrics[key]})
		}
	}
	if len(xys) == 0 {
		s.logf("no finished run for %s: not drawn", path)
		return nil
	}
	p := plot.New()
	p.Title.Text = strings.Replace(title, " (", "\n(", 1) // the settings on a second line: one line is wider than the figure
	p.X.Label.Text = xlabel
	p.Y.Label.Text = key
	p.Add(plotter.NewGrid())
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	blue := color.RGBA{R: 68, G: 114, B: 196, A: 255}
	line.Color, points.Color = blue, blue
	points.Shape = draw.CircleGlyph{}
	p.Add(line, points)
	p.Legend.Add("SelectInfer", line, points)
	// The x range with room on both sides, so the first and last points
	// stand clear of the axis and the edge.
	pad := max(0.04*(pts[len(pts)-1].x-pts[0].x), 0.02) // 0.02: one point (x are fractions of N)
	lo, hi := pts[0].x-pad, pts[len(pts)-1].x+pad
	if group == GroupLayers {
		names := make([]string, len(pts))
		for i, pt := range pts {
			names[i] = pt.label
		}
		p.NominalX(names...)
		lo, hi = -0.5, float64(len(pts))-0.5
	}
	p.X.Min, p.X.Max = lo, hi
	if dense := s.tableRun("dense", s.opt.SweepTask); dense != nil {
		v := dense.Metrics[key]
		ref, err := plotter.NewLine(plotter.XYs{{X: lo, Y: v}, {X: hi, Y: v}})
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		ref.Color = color.RGBA{R: 200, G: 60, B: 60, A: 255}
		ref.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(ref)
		p.Legend.Add("Dense", ref)
	}
	span := p.Y.Max - p.Y.Min
	p.Y.Max += 0.2 * span  // room for the legend
	p.Y.Min -= 0.05 * span // the dense line clear of the axis
	// Top left, text after the icons: a renderer whose font is wider than
	// the one measured (rsvg without Liberation Serif) runs the text into
	// empty space, not into the icons.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(4)
	return savePlot(p, path, 7*vg.Inch, 4.5*vg.Inch)
}

// savePlot writes p to path (atomically) in the format of path's extension,
// SVG, PNG or PDF, w × h, with margins: gonum draws the data area to the
// canvas's right edge, which cut the legend and the last point, and the y
// label at its left edge.
func savePlot(p *plot.Plot, path string, w, h vg.Length) error {
	c, err := draw.NewFormattedCanvas(w, h, strings.TrimPrefix(filepath.Ext(path), "."))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	p.Draw(draw.Crop(draw.New(c), vg.Points(6), -vg.Inch/4, 0, 0))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return WriteAtomic(path, buf.Bytes())
}
