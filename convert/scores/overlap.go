package scores

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Overlap returns how much the top fraction frac of a's neurons coincides
// with b's: per layer |A∩B|/|A| (A and B have the same size, TopCount of
// intermediate_size), and its mean over the layers. The files must be of one
// model (same digest and shapes) and frac must select at least one neuron.
func Overlap(a, b *File, frac float64) (mean float64, perLayer []float64, err error) {
	return OverlapAll([]*File{a, b}, frac)
}

// OverlapAll returns the overlap of the top fraction frac of the neurons of
// all files: per layer |A∩B∩C…|/|A|, and its mean over the layers. It needs
// at least two files, of one model.
func OverlapAll(files []*File, frac float64) (mean float64, perLayer []float64, err error) {
	if len(files) < 2 {
		return 0, nil, fmt.Errorf("scores: overlap needs at least 2 files, got %d", len(files))
	}
	if err := sameModel(files, nil); err != nil {
		return 0, nil, err
	}
	if err := checkFrac(files[0].IntermediateSize(), frac); err != nil {
		return 0, nil, err
	}
	sets := make([][][]int32, len(files))
	for i, f := range files {
		sets[i] = TopSet(f, frac)
	}
	perLayer, _ = overlapSets(sets, files[0].IntermediateSize())
	return meanOf(perLayer), perLayer, nil
}

func checkFrac(n int, frac float64) error {
	if math.IsNaN(frac) || frac <= 0 || frac > 1 {
		return fmt.Errorf("scores: overlap fraction %v is not in (0, 1]", frac)
	}
	if TopCount(n, frac) == 0 {
		return fmt.Errorf("scores: overlap fraction %v of %d neurons rounds to 0", frac, n)
	}
	return nil
}

// overlapSets returns, per layer, |∩ sets[i][l]| / |sets[0][l]| and the
// intersection over union |∩ sets[i][l]| / |∪ sets[i][l]| for top sets of
// equal, non-zero size over n neurons.
func overlapSets(sets [][][]int32, n int) (perLayer, iou []float64) {
	layers := len(sets[0])
	perLayer, iou = make([]float64, layers), make([]float64, layers)
	count := make([]int32, n)
	for l := range layers {
		clear(count)
		for _, s := range sets {
			for _, i := range s[l] {
				count[i]++
			}
		}
		common, union := 0, 0
		for _, c := range count {
			if int(c) == len(sets) {
				common++
			}
			if c > 0 {
				union++
			}
		}
		perLayer[l] = float64(common) / float64(len(sets[0][l]))
		iou[l] = float64(common) / float64(union)
	}
	return perLayer, iou
}

// Chance returns what the overlap measures give for m independent uniformly
// random top sets of k of n neurons, as ratios of expectations: |∩|/|A| =
// p^(m−1) exactly in expectation, and IoU ≈ E|∩|/E|∪| = p^m / (1 − (1−p)^m)
// with p = k/n (two sets: p/(2−p); 0.25 at p = 0.4, against 0.40 for
// |A∩B|/|A|). The paper's 24–26% cross-task figures sit at IoU's chance.
func Chance(k, n, m int) (overlap, iou float64) {
	p := float64(k) / float64(n)
	return math.Pow(p, float64(m-1)), math.Pow(p, float64(m)) / (1 - math.Pow(1-p, float64(m)))
}

// sameModel checks that files share a model digest and layer shape; labels
// (may be nil) name them in errors.
func sameModel(files []*File, labels []string) error {
	label := func(i int) string {
		if labels != nil {
			return fmt.Sprintf("%q", labels[i])
		}
		return fmt.Sprintf("file #%d", i)
	}
	for i, f := range files {
		if f == nil {
			return fmt.Errorf("scores: %s is nil", label(i))
		}
		if len(f.Scores) == 0 || len(f.Scores[0]) == 0 {
			return fmt.Errorf("scores: %s has no scores", label(i))
		}
		for l, row := range f.Scores {
			if len(row) != len(f.Scores[0]) {
				return fmt.Errorf("scores: %s: layer %d has %d scores, layer 0 has %d", label(i), l, len(row), len(f.Scores[0]))
			}
		}
		a := files[0]
		if f.ModelDigest != a.ModelDigest {
			return fmt.Errorf("scores: %s has %s %s, %s has %s: different models", label(0), KeyModelDigest, a.ModelDigest, label(i), f.ModelDigest)
		}
		if f.Layers() != a.Layers() || f.IntermediateSize() != a.IntermediateSize() {
			return fmt.Errorf("scores: %s has %d layers × %d neurons, %s has %d × %d", label(0), a.Layers(), a.IntermediateSize(), label(i), f.Layers(), f.IntermediateSize())
		}
	}
	return nil
}

func meanOf(xs []float64) float64 {
	var s, c float64
	for _, x := range xs {
		s, c = neumaier(s, c, x)
	}
	return (s + c) / float64(len(xs))
}

// Report is the overlap table of a set of labelled score files (paper §2,
// Figs 2–4): Pairwise[i][j] is the mean over layers of the overlap |A∩B|/|A|
// of files i and j (1 on the diagonal), PerLayer[i][j] its per-layer
// values; All and AllPerLayer are the same for all files at once. The IoU
// fields hold the intersection over union the same way. Chance and
// ChanceIoU are the pairwise figures of random sets (Chance), ChanceAll and
// ChanceAllIoU those of as many random sets as files.
type Report struct {
	Labels                  []string
	Frac                    float64
	Pairwise                [][]float64
	PerLayer                [][][]float64
	All                     float64
	AllPerLayer             []float64
	PairwiseIoU             [][]float64
	AllIoU                  float64
	Chance, ChanceIoU       float64
	ChanceAll, ChanceAllIoU float64
}

// BuildReport computes the Report of files (at least two, of one model),
// labelled by labels, for the top fraction frac.
func BuildReport(labels []string, files []*File, frac float64) (*Report, error) {
	if len(labels) != len(files) {
		return nil, fmt.Errorf("scores: report of %d files with %d labels", len(files), len(labels))
	}
	if len(files) < 2 {
		return nil, fmt.Errorf("scores: report needs at least 2 files, got %d", len(files))
	}
	if err := sameModel(files, labels); err != nil {
		return nil, err
	}
	r := &Report{Labels: append([]string(nil), labels...), Frac: frac}
	m := len(files)
	r.Pairwise, r.PairwiseIoU = make([][]float64, m), make([][]float64, m)
	r.PerLayer = make([][][]float64, m)
	for i := range m {
		r.Pairwise[i], r.PairwiseIoU[i] = make([]float64, m), make([]float64, m)
		r.PerLayer[i] = make([][]float64, m)
	}
	if err := checkFrac(files[0].IntermediateSize(), frac); err != nil {
		return nil, err
	}
	sets := make([][][]int32, m)
	for i, f := range files {
		sets[i] = TopSet(f, frac)
	}
	for i := range m {
		for j := i; j < m; j++ {
			per, iou := overlapSets([][][]int32{sets[i], sets[j]}, files[0].IntermediateSize())
			r.Pairwise[i][j] = meanOf(per)
			r.Pairwise[j][i] = r.Pairwise[i][j]
			r.PairwiseIoU[i][j] = meanOf(iou)
			r.PairwiseIoU[j][i] = r.PairwiseIoU[i][j]
			r.PerLayer[i][j] = per
			r.PerLayer[j][i] = append([]float64(nil), per...)
		}
	}
	var allIoU []float64
	r.AllPerLayer, allIoU = overlapSets(sets, files[0].IntermediateSize())
	r.All, r.AllIoU = meanOf(r.AllPerLayer), meanOf(allIoU)
	n := files[0].IntermediateSize()
	k := TopCount(n, frac)
	r.Chance, r.ChanceIoU = Chance(k, n, 2)
	r.ChanceAll, r.ChanceAllIoU = Chance(k, n, m)
	return r, nil
}

// pairs returns the index pairs i < j in row order.
func (r *Report) pairs() [][2]int {
	var ps [][2]int
	for i := range r.Labels {
		for j := i + 1; j < len(r.Labels); j++ {
			ps = append(ps, [2]int{i, j})
		}
	}
	return ps
}

func (r *Report) pairLabel(p [2]int) string {
	return r.Labels[p[0]] + " & " + r.Labels[p[1]]
}

// WriteTable writes the report as plain text: the pairwise matrix of mean
// overlaps, the all-files overlap, then the per-layer overlap of every pair
// and of all files.
func (r *Report) WriteTable(w io.Writer) error {
	layers := len(r.AllPerLayer)
	var b strings.Builder
	fmt.Fprintf(&b, "Neuron overlap of the top %s of neurons per layer: |A∩B|/|A|, mean over %d layers\n\n", percent(r.Frac), layers)
	if err := r.writeMatrix(&b, r.Pairwise); err != nil {
		return err
	}
	fmt.Fprintf(&b, "(random sets of this size: %.4f)\n\nIntersection over union |A∩B|/|A∪B|, mean over %d layers\n\n", r.Chance, layers)
	if err := r.writeMatrix(&b, r.PairwiseIoU); err != nil {
		return err
	}
	fmt.Fprintf(&b, "(random sets of this size: %.4f, ratio of expectations)\n", r.ChanceIoU)
	fmt.Fprintf(&b, "\nAll %d files: |A∩B∩…|/|A| %.4f (random %.4f), IoU %.4f (random %.4f)\n\nPer layer (|A∩B|/|A|):\n\n",
		len(r.Labels), r.All, r.ChanceAll, r.AllIoU, r.ChanceAllIoU)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	ps := r.pairs()
	fmt.Fprint(tw, "layer\t")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t", r.pairLabel(p))
	}
	fmt.Fprintln(tw, "all\t")
	for l := range layers {
		fmt.Fprintf(tw, "%d\t", l)
		for _, p := range ps {
			fmt.Fprintf(tw, "%.4f\t", r.PerLayer[p[0]][p[1]][l])
		}
		fmt.Fprintf(tw, "%.4f\t\n", r.AllPerLayer[l])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMatrix writes a labelled square matrix of pairwise figures.
func (r *Report) writeMatrix(w io.Writer, m [][]float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, l := range r.Labels {
		fmt.Fprintf(tw, "%s\t", l)
	}
	fmt.Fprintln(tw)
	for i, l := range r.Labels {
		fmt.Fprintf(tw, "%s\t", l)
		for j := range r.Labels {
			fmt.Fprintf(tw, "%.4f\t", m[i][j])
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func percent(frac float64) string {
	s := fmt.Sprintf("%.2f", 100*frac)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "%"
}
