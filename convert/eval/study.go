package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/recon"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// Measured is what a Runner returns: the evaluation and how its memory was
// measured.
type Measured struct {
	Result       *Result
	FileBytes    int64
	MemorySource string // how Result.PeakRSS was measured
}

// Runner evaluates task on the model at path (.sinf file or HF folder).
type Runner func(path, task string, opt Options) (*Measured, error)

// InProcess is the default Runner: it opens the model in this process and
// calls Evaluate. Its peak RSS is this process's VmHWM, reset before the run
// where Linux allows it (after returning freed heap to the system), so it
// includes the process's baseline.
func InProcess(path, task string, opt Options) (*Measured, error) {
	debug.FreeOSMemory()
	src := "in-process VmHWM (reset before the run; includes the process baseline)"
	if !runtime.ResetPeakRSS() {
		src = "in-process VmHWM (not resettable here: the process's peak so far)"
	}
	l, err := OpenWith(path, hf.Options{Strict: opt.Strict})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	res, err := Evaluate(l.Model, l.Tok, task, opt)
	if err != nil {
		return nil, err
	}
	return &Measured{Result: res, FileBytes: l.FileBytes, MemorySource: src}, nil
}

// StudyOptions configures Study. Zero values take the defaults noted.
type StudyOptions struct {
	Model                   string   // HF checkpoint folder (the dense row and the source of every file)
	TaskScores, ModelScores string   // score files for the slim (selective-loading) files
	Tasks                   []string // built-in tasks of the table (default: tinystories)
	SweepTask               string   // task of the sweeps (default: Tasks[0])
	NoSweeps                bool     // only the table
	Limit                   int      // examples (perplexity: windows) per run (≤ 0: all)
	DataDir                 string
	Out                     string // output folder (created)
	// FirstLayer, LastLayer: the sliced layer range (convert.ResolveRange).
	// Without ExplicitRange the paper's default 5 … −2 is used when it is
	// valid for the model, else every layer.
	FirstLayer, LastLayer int
	ExplicitRange         bool
	Gamma, Delta          float64 // default 0.7, 0.3
	Phi, Alpha            float64 // default 0.4, 0.2
	Seed                  uint64  // of the random-loading and full files
	Threads, Context      int     // per run (≤ 0: kernels.DefaultThreads(), max_position_embeddings)
	// DTypes adds, for each stored dtype (such as Q8_0 and Q4_0), the
	// rows of the dtype table (the layout of the paper's Table 4: γ-dense
	// against quantized): dense (a γ=1 file in the dtype), γ-dense and
	// SelectInfer (slim files in the dtype), on every task.
	DTypes []convert.Recipe
	// Mass adds the activation-mass report (Options.Mass) to every sparse
	// run: slower, as those runs then compute every loaded neuron.
	Mass bool
	// Figures is the figures' format: "svg" (default), "png" or "pdf".
	Figures string
	// Strict refuses stored tensors the architecture does not have
	// (hf.Options.Strict), in the conversions and the Dense row's runs
	// (Options.Strict); without it they are skipped, with a warning in Log.
	Strict bool
	// Reconstruct is the reconstruction of the reconstructed rows' files
	// (GateFirst, Oracle and the γ-Dense curve; default recon.Both); the
	// table also has a γ-Dense row for each of bias, refit and both.
	// ReconstructData (default tinystories) and ReconstructLimit (default
	// 400 prompts per dataset; < 0: all) are the calibration text (the
	// profile split), each prompt continued by ReconstructGenerate tokens
	// the model samples (default convert.DefaultReconstructGenerate; < 0:
	// none). NoReconstruct leaves these rows out.
	Reconstruct         recon.Method
	ReconstructData     []string
	ReconstructLimit    int
	ReconstructGenerate int
	NoReconstruct       bool
	Runner              Runner // nil: InProcess
	Log                 io.Writer
}

// Sweep values (paper Fig. 10, 9).
var (
	PhiSweep   = []float64{0.2, 0.3, 0.4, 0.5, 0.6, 0.7}
	GammaSweep = []float64{0.5, 0.6, 0.7, 0.8, 0.9, 1.0}
	DeltaSweep = []float64{0.1, 0.2, 0.3, 0.4}
)

// Run groups.
const (
	GroupTable  = "table"
	GroupPhi    = "fig10_phi"
	GroupGamma  = "fig10_gamma"
	GroupDelta  = "fig9_delta"
	GroupLayers = "fig8_layers"
	GroupDType  = "table4_dtype"
	// GroupCurves: the φ (γ for γ-dense) sweeps of every method on
	// SweepTask, for the metric against bytes read per decoded token.
	GroupCurves = "curves"
)

// CurvePhis are the φ of the GroupCurves sweeps of CoreInfer and GateFirst
// (those above γ are left out).
var CurvePhis = []float64{0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7}

// File kinds.
const (
	FileHF     = "hf"     // the HF folder itself
	FileSlim   = "slim"   // γ, δ from the score files
	FileRandom = "random" // γ random neurons
	FileFull   = "full"   // random with γ = 1: every neuron, the CoreInfer file
)

// Run is one evaluation of the study (an entry of results.json).
type Run struct {
	ID       string  `json:"id"`
	Group    string  `json:"group"`
	Row      string  `json:"row"`
	Task     string  `json:"task"`
	Kind     string  `json:"kind"`
	Mode     string  `json:"mode"`
	File     string  `json:"file"`
	FileKind string  `json:"file_kind"`
	Gamma    float64 `json:"gamma"`
	Delta    float64 `json:"delta"`
	// Phi is the fraction of N computed per decode step in sliced layers
	// (dense: γ, 1 for the HF folder).
	Phi        float64            `json:"phi"`
	Alpha      float64            `json:"alpha"`
	FirstLayer int                `json:"first_layer"` // sliced range [first, last); 0, 0 for the HF folder
	LastLayer  int                `json:"last_layer"`
	Limit      int                `json:"limit"`
	Key        string             `json:"key"` // what determines the result; equal keys give equal results
	N          int                `json:"n,omitempty"`
	Metrics    map[string]float64 `json:"metrics,omitempty"`
	Seconds    float64            `json:"seconds,omitempty"`
	Context    int                `json:"context,omitempty"`
	FileBytes  int64              `json:"file_bytes,omitempty"`
	KVBytes    int64              `json:"kv_cache_bytes,omitempty"`
	// PeakRSSBytes is the measured peak resident set size of the run (see
	// MemorySource); PeakMemoryBytes the study's peak memory figure, the
	// same measurement.
	PeakRSSBytes    int64 `json:"peak_rss_bytes,omitempty"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes,omitempty"`
	// BytesPerToken and FFNBytesPerToken: weight bytes read per decoded
	// token, all and of the FFN layers (synth.BytesPerToken).
	BytesPerToken    int64 `json:"bytes_per_token,omitempty"`
	FFNBytesPerToken int64 `json:"ffn_bytes_per_token,omitempty"`
	// Mass: the activation-mass shares over the sliced layers
	// (StudyOptions.Mass; MassShare: computed, best, random).
	Mass         *MassShare `json:"mass,omitempty"`
	MemorySource string     `json:"memory_source,omitempty"`
	ReusedFrom   string     `json:"reused_from,omitempty"`
	Error        string     `json:"error,omitempty"`
	Finished     string     `json:"finished,omitempty"`

	fs fileSpec
}

// Results is results.json.
type Results struct {
	Model string `json:"model"`
	Runs  []*Run `json:"runs"`
}

// fileSpec is a model file the runs need.
type fileSpec struct {
	kind         string
	gamma, delta float64
	lo, hi       int
	dtype        convert.Recipe // DType 0: the checkpoint's
	recon        recon.Method   // slim files: the reconstruction (None: plain)
	sketch       bool           // slim files: up_proj sketches (convert --predictor sketch)
}

func (f fileSpec) name() string {
	var d string
	if f.dtype.DType != 0 {
		d = "-" + f.dtype.ID()
	}
	if f.recon != recon.None {
		d += "-r" + f.recon.String()
	}
	if f.sketch {
		d += "-sketch"
	}
	switch f.kind {
	case FileSlim:
		return fmt.Sprintf("slim-g%.2f-d%.2f-L%d-%d%s.sinf", f.gamma, f.delta, f.lo, f.hi, d)
	case FileRandom:
		return fmt.Sprintf("random-g%.2f-L%d-%d%s.sinf", f.gamma, f.lo, f.hi, d)
	case FileFull:
		return fmt.Sprintf("full-L%d-%d%s.sinf", f.lo, f.hi, d)
	}
	return ""
}

// Study runs the paper's grid on one model and writes, into opt.Out, the
// converted files it needs, results.json (after every run, atomically),
// table.md and the figures fig10_phi.svg, fig10_gamma.svg, fig9_delta.svg
// and fig8_layers.svg. It resumes: runs already in results.json with the
// same key and no error are not run again, and files that exist, verify and
// match their parameters (selection, source digest, score digests) are
// reused; a file converted again drops the runs that used it.
//
// Rows of the table (each on every task): Dense (HF folder), γ-Dense (slim,
// dense), SelectInfer (slim, selectinfer φ), CoreInfer (full, coreinfer φ),
// CoreInfer + selective loading (slim, coreinfer φ), CoreInfer + random
// loading (random, coreinfer φ). Sweeps (SelectInfer on SweepTask): φ (with
// δ lowered to φ where δ > φ), γ, δ and a few layer ranges.
func Study(opt StudyOptions) (*Results, error) {
	s, err := newStudy(opt)
	if err != nil {
		return nil, err
	}
	return s.run()
}

type study struct {
	opt      StudyOptions
	cfg      runtime.Config
	upDType  format.DType // the checkpoint's up_proj dtype (the sketch rows' φ)
	lo, hi   int
	plan     []*Run
	res      *Results
	ensured  map[string]bool
	ck       *hf.Checkpoint
	digest   string
	taskSc   *scores.File
	modelSc  *scores.File
	calib    [][]int // reconstruction prompts (calibration)
	failures int
}

func (s *study) logf(format string, args ...any) {
	if s.opt.Log != nil {
		fmt.Fprintf(s.opt.Log, format+"\n", args...)
	}
}

func newStudy(opt StudyOptions) (*study, error) {
	if opt.Model == "" || opt.Out == "" {
		return nil, errors.New("study: the model folder and the output folder are required")
	}
	if opt.TaskScores == "" || opt.ModelScores == "" {
		return nil, errors.New("study: the task and model score files are required")
	}
	for _, p := range []string{opt.TaskScores, opt.ModelScores} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("study: score file: %w", err)
		}
	}
	// Absolute paths: the run keys (and so resuming) do not depend on the
	// working folder.
	var err error
	if opt.Model, err = filepath.Abs(opt.Model); err != nil {
		return nil, err
	}
	if opt.Out, err = filepath.Abs(opt.Out); err != nil {
		return nil, err
	}
	if len(opt.Tasks) == 0 {
		opt.Tasks = []string{"tinystories"}
	}
	if opt.SweepTask == "" {
		opt.SweepTask = opt.Tasks[0]
	}
	if opt.Gamma == 0 {
		opt.Gamma = 0.7
	}
	if opt.Delta == 0 {
		opt.Delta = 0.3
	}
	switch opt.Figures {
	case "", "svg", "png", "pdf":
	default:
		return nil, fmt.Errorf("study: figure format %q: want svg, png or pdf", opt.Figures)
	}
	if opt.Phi == 0 {
		opt.Phi = runtime.DefaultSparsity.Phi
	}
	if opt.Alpha == 0 {
		opt.Alpha = runtime.DefaultSparsity.Alpha
	}
	if opt.Runner == nil {
		opt.Runner = InProcess
	}
	if opt.Reconstruct == recon.None {
		opt.Reconstruct = recon.Both
	}
	if len(opt.ReconstructData) == 0 {
		opt.ReconstructData = []string{"tinystories"}
	}
	if opt.ReconstructLimit == 0 {
		opt.ReconstructLimit = 400
	}
	if opt.ReconstructGenerate == 0 {
		opt.ReconstructGenerate = convert.DefaultReconstructGenerate
	}
	var dts []convert.Recipe // without repeats: each dtype's rows once
	for _, d := range opt.DTypes {
		if !slices.Contains(dts, d) {
			dts = append(dts, d)
		}
	}
	opt.DTypes = dts
	seen := map[string]bool{}
	for _, t := range append(append([]string(nil), opt.Tasks...), opt.SweepTask) {
		if seen[t] {
			continue
		}
		seen[t] = true
		if _, err := dataset.Lookup(t); err != nil {
			return nil, err
		}
		if err := dataset.CheckFiles(t, opt.DataDir); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(filepath.Join(opt.Model, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("study: %w", err)
	}
	cfg, err := runtime.ParseConfig(filepath.Join(opt.Model, "config.json"), b)
	if err != nil {
		return nil, err
	}
	if opt.Context > cfg.MaxPositions { // each evaluation would refuse it, after the first conversions
		return nil, fmt.Errorf("--context %d: above the model's max_position_embeddings %d", opt.Context, cfg.MaxPositions)
	}
	s := &study{opt: opt, cfg: cfg, ensured: map[string]bool{}}
	if opt.ExplicitRange {
		if s.lo, s.hi, err = convert.ResolveRange(opt.FirstLayer, opt.LastLayer, cfg.Layers, true); err != nil {
			return nil, err
		}
	} else {
		d := convert.DefaultOptions()
		if s.lo, s.hi, err = convert.ResolveRange(d.FirstLayer, d.LastLayer, cfg.Layers, false); err != nil {
			s.lo, s.hi = 0, cfg.Layers
		}
	}
	if !(opt.Phi <= opt.Gamma && opt.Delta <= opt.Phi) {
		return nil, fmt.Errorf("study: need delta %g ≤ phi %g ≤ gamma %g", opt.Delta, opt.Phi, opt.Gamma)
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, err
	}
	if !opt.NoReconstruct {
		if s.upDType, err = checkpointDType(opt.Model); err != nil {
			return nil, err
		}
	}
	s.buildPlan()
	return s, nil
}

// checkpointDType returns the dtype of layer 0's up_proj in the HF
// checkpoint folder dir (the dtype its slim files store without --dtype).
func checkpointDType(dir string) (format.DType, error) {
	ck, err := hf.Open(dir)
	if err != nil {
		return 0, err
	}
	defer ck.Close()
	t, err := ck.Tensor("model.layers.0.mlp.up_proj.weight")
	if err != nil {
		return 0, fmt.Errorf("study: %s: %w", dir, err)
	}
	return t.DType, nil
}

func (s *study) add(group, row, id, task string, mode runtime.Mode, fs fileSpec, phi float64) {
	o := s.opt
	t, _ := dataset.Lookup(task)
	r := &Run{ID: group + "/" + id + "/" + task, Group: group, Row: row, Task: task, Kind: t.Kind, Mode: mode.String(),
		FileKind: fs.kind, Gamma: fs.gamma, Delta: fs.delta, Phi: phi, FirstLayer: fs.lo, LastLayer: fs.hi,
		Limit: o.Limit, fs: fs}
	if mode != runtime.Dense && !mode.PerToken() {
		r.Alpha = o.Alpha
	}
	if fs.kind == FileHF {
		r.File = o.Model
	} else {
		r.File = filepath.Join(o.Out, fs.name())
	}
	r.Key = fmt.Sprintf("file=%s mode=%s phi=%g alpha=%g task=%s limit=%d context=%d", r.File, r.Mode, r.Phi, r.Alpha, task, o.Limit, o.Context)
	if o.Mass && mode != runtime.Dense {
		r.Key += " mass"
	}
	s.plan = append(s.plan, r)
}

// Table rows in order: id, label.
var tableRows = []struct{ id, label string }{
	{"dense", "Dense"},
	{"gamma-dense", "γ-Dense"},
	{"selectinfer", "SelectInfer"},
	{"coreinfer", "CoreInfer"},
	{"coreinfer-selective", "CoreInfer + selective loading"},
	{"coreinfer-random", "CoreInfer + random loading"},
	{"gatefirst", "GateFirst"},
	{"oracle", "Oracle: top φ·N by true \\|a\\| per token (a bound; reads every stored row)"},
	{"gamma-dense-rbias", "γ-Dense + bias compensation"},
	{"gamma-dense-rrefit", "γ-Dense + refit"},
	{"gamma-dense-rboth", "γ-Dense + refit and bias"},
	{"gatefirst-recon", "GateFirst, reconstructed file"},
	{"oracle-recon", "Oracle, reconstructed file"},
	{"gatefirst-sketch", "GateFirst, reconstructed file with up_proj sketches (φ at the same bytes)"},
	{"oracle-sketch", "Oracle, the same file and count"},
}

// dtypeID names a recipe in run IDs and file names ("q4_0", "q4_k_m").
func dtypeID(d convert.Recipe) string { return d.ID() }

// Rows of the dtype table, for each StudyOptions.DTypes entry.
var dtypeRows = []struct {
	id, label string
	mode      runtime.Mode
}{
	{"dense", "Dense", runtime.Dense},
	{"gamma-dense", "γ-Dense", runtime.Dense},
	{"selectinfer", "SelectInfer", runtime.SelectInfer},
}

func (s *study) buildPlan() {
	o := s.opt
	slim := fileSpec{kind: FileSlim, gamma: o.Gamma, delta: o.Delta, lo: s.lo, hi: s.hi}
	random := fileSpec{kind: FileRandom, gamma: o.Gamma, delta: o.Delta, lo: s.lo, hi: s.hi}
	full := fileSpec{kind: FileFull, gamma: 1, delta: o.Delta, lo: s.lo, hi: s.hi}
	hfs := fileSpec{kind: FileHF, gamma: 1}
	for _, task := range o.Tasks {
		s.add(GroupTable, tableRows[0].label, tableRows[0].id, task, runtime.Dense, hfs, 1)
		s.add(GroupTable, tableRows[1].label, tableRows[1].id, task, runtime.Dense, slim, o.Gamma)
		s.add(GroupTable, tableRows[2].label, tableRows[2].id, task, runtime.SelectInfer, slim, o.Phi)
		s.add(GroupTable, tableRows[3].label, tableRows[3].id, task, runtime.CoreInfer, full, o.Phi)
		s.add(GroupTable, tableRows[4].label, tableRows[4].id, task, runtime.CoreInfer, slim, o.Phi)
		s.add(GroupTable, tableRows[5].label, tableRows[5].id, task, runtime.CoreInfer, random, o.Phi)
		phi := runtime.GateFirstPhi(o.Gamma, o.Phi)
		if phi > 0 {
			s.add(GroupTable, tableRows[6].label, tableRows[6].id, task, runtime.GateFirst, slim, phi)
			s.add(GroupTable, tableRows[7].label, tableRows[7].id, task, runtime.Oracle, slim, phi)
		}
		if !o.NoReconstruct {
			for i, m := range []recon.Method{recon.Bias, recon.Refit, recon.Both} {
				fs := slim
				fs.recon = m
				s.add(GroupTable, tableRows[8+i].label, tableRows[8+i].id, task, runtime.Dense, fs, o.Gamma)
			}
			if phi > 0 {
				fs := slim
				fs.recon = o.Reconstruct
				s.add(GroupTable, tableRows[11].label, tableRows[11].id, task, runtime.GateFirst, fs, phi)
				s.add(GroupTable, tableRows[12].label, tableRows[12].id, task, runtime.Oracle, fs, phi)
				fs.sketch = true
				if sp := runtime.GateFirstSketchPhi(o.Gamma, o.Phi, runtime.SketchShare(s.upDType), s.cfg.Intermediate); sp > 0 {
					s.add(GroupTable, tableRows[13].label, tableRows[13].id, task, runtime.GateFirst, fs, sp)
					s.add(GroupTable, tableRows[14].label, tableRows[14].id, task, runtime.Oracle, fs, sp)
				}
			}
		}
		for _, d := range o.DTypes {
			full, slim := full, slim
			full.dtype, slim.dtype = d, d
			for _, r := range dtypeRows {
				fs := slim
				if r.id == "dense" {
					fs = full
				}
				phi := o.Phi
				if r.mode == runtime.Dense {
					phi = fs.gamma
				}
				s.add(GroupDType, r.label+", "+d.String(), r.id+"-"+dtypeID(d), task, r.mode, fs, phi)
			}
		}
	}
	if o.NoSweeps {
		return
	}
	task := o.SweepTask
	if !contains(o.Tasks, task) {
		s.add(GroupTable, tableRows[0].label, tableRows[0].id, task, runtime.Dense, hfs, 1)
	}
	for _, phi := range PhiSweep {
		if phi > o.Gamma {
			continue
		}
		fs := slim
		fs.delta = math.Min(o.Delta, phi)
		s.add(GroupPhi, "φ="+ftoa(phi), "phi="+ftoa(phi), task, runtime.SelectInfer, fs, phi)
	}
	for _, g := range GammaSweep {
		if g < o.Phi || g < o.Delta {
			continue
		}
		fs := slim
		fs.gamma = g
		s.add(GroupGamma, "γ="+ftoa(g), "gamma="+ftoa(g), task, runtime.SelectInfer, fs, o.Phi)
	}
	for _, d := range DeltaSweep {
		if d > o.Phi {
			continue
		}
		fs := slim
		fs.delta = d
		s.add(GroupDelta, "δ="+ftoa(d), "delta="+ftoa(d), task, runtime.SelectInfer, fs, o.Phi)
	}
	for _, r := range LayerRanges(s.cfg.Layers, s.lo, s.hi) {
		fs := slim
		fs.lo, fs.hi = r[0], r[1]
		label := fmt.Sprintf("[%d, %d)", r[0], r[1])
		s.add(GroupLayers, label, fmt.Sprintf("L%d-%d", r[0], r[1]), task, runtime.SelectInfer, fs, o.Phi)
	}
	// The curves: γ-dense over γ, CoreInfer (full file) and GateFirst (the
	// γ file) over φ; SelectInfer's is the φ sweep above. Runs equal to
	// planned ones are reused, not run again.
	for _, g := range GammaSweep {
		if g < o.Delta {
			continue
		}
		fs := slim
		fs.gamma = g
		s.add(GroupCurves, "γ-Dense γ="+ftoa(g), "gamma-dense-gamma="+ftoa(g), task, runtime.Dense, fs, g)
		if !o.NoReconstruct && g < 1 {
			fs.recon = o.Reconstruct
			s.add(GroupCurves, "γ-Dense + reconstruction γ="+ftoa(g), "recon-gamma-dense-gamma="+ftoa(g), task, runtime.Dense, fs, g)
		}
	}
	for _, phi := range CurvePhis {
		s.add(GroupCurves, "CoreInfer φ="+ftoa(phi), "coreinfer-phi="+ftoa(phi), task, runtime.CoreInfer, full, phi)
		if phi <= o.Gamma {
			s.add(GroupCurves, "GateFirst φ="+ftoa(phi), "gatefirst-phi="+ftoa(phi), task, runtime.GateFirst, slim, phi)
		}
	}
}

// LayerRanges returns the layer ranges of the Fig. 8 sweep for a model of L
// layers: the study's range [lo, hi), every layer, the first and the second
// half, and (L ≥ 4) all but the first and last layer; without duplicates,
// sorted by start then end.
func LayerRanges(L, lo, hi int) [][2]int {
	cands := [][2]int{{lo, hi}, {0, L}, {0, (L + 1) / 2}, {L / 2, L}}
	if L >= 4 {
		cands = append(cands, [2]int{1, L - 1})
	}
	var out [][2]int
	for _, c := range cands {
		if c[0] < 0 || c[1] > L || c[0] >= c[1] {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == c
		}
		if !dup {
			out = append(out, c)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && (out[j][0] < out[j-1][0] || out[j][0] == out[j-1][0] && out[j][1] < out[j-1][1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func (s *study) resultsPath() string { return filepath.Join(s.opt.Out, "results.json") }

func (s *study) load() error {
	s.res = &Results{Model: s.opt.Model}
	b, err := os.ReadFile(s.resultsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, s.res); err != nil {
		return fmt.Errorf("%s: %w (move it away to start afresh)", s.resultsPath(), err)
	}
	s.res.Model = s.opt.Model
	return nil
}

func (s *study) save() error {
	b, err := json.MarshalIndent(s.res, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(s.resultsPath(), append(b, '\n'))
}

// WriteAtomic writes data to path through a temporary file in the same
// folder renamed into place.
func WriteAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(name, 0o644)
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// find returns the stored run with this id, or nil.
func (s *study) find(id string) (int, *Run) {
	for i, r := range s.res.Runs {
		if r.ID == id {
			return i, r
		}
	}
	return -1, nil
}

func (s *study) put(r *Run) {
	if i, _ := s.find(r.ID); i >= 0 {
		s.res.Runs[i] = r
		return
	}
	s.res.Runs = append(s.res.Runs, r)
}

func finished(r *Run) bool { return r != nil && r.Error == "" && r.Metrics != nil }

func (s *study) run() (*Results, error) {
	defer func() {
		if s.ck != nil {
			s.ck.Close()
		}
	}()
	if err := s.load(); err != nil {
		return nil, err
	}
	if err := s.checkScores(); err != nil {
		return nil, err
	}
	todo := 0
	for _, p := range s.plan {
		if _, r := s.find(p.ID); !(finished(r) && r.Key == p.Key) {
			todo++
		}
	}
	s.logf("study: %d runs planned, %d to do, results in %s", len(s.plan), todo, s.resultsPath())
	done := 0
	for _, p := range s.plan {
		if _, r := s.find(p.ID); finished(r) && r.Key == p.Key {
			continue
		}
		done++
		if err := s.execute(p, done, todo); err != nil {
			return nil, err
		}
	}
	if err := s.writeReport(); err != nil {
		return nil, err
	}
	if s.failures > 0 {
		return s.res, fmt.Errorf("study: %d runs failed (their errors are in %s); the table leaves them out", s.failures, s.resultsPath())
	}
	return s.res, nil
}

// execute runs p (or copies an equal finished run) and saves the results.
func (s *study) execute(p *Run, n, total int) error {
	r := *p
	for _, o := range s.res.Runs {
		if o.ID != p.ID && o.Key == p.Key && finished(o) && o.ReusedFrom == "" {
			copyResult(&r, o)
			r.ReusedFrom = o.ID
			s.logf("[%d/%d] %s: same configuration as %s, reused", n, total, r.ID, o.ID)
			s.put(&r)
			return s.save()
		}
	}
	if err := s.openCheckpoint(); err != nil { // its warnings, once, before the first run
		return err
	}
	if err := s.ensure(p.fs); err != nil {
		return err
	}
	sp := runtime.Sparsity{Phi: p.Phi, Alpha: s.opt.Alpha}
	sp.Mode, _ = runtime.ParseMode(p.Mode)
	opt := Options{DataDir: s.opt.DataDir, Limit: s.opt.Limit, Sparsity: sp, Threads: s.opt.Threads, Context: s.opt.Context,
		Mass: s.opt.Mass && sp.Mode != runtime.Dense, Strict: s.opt.Strict}
	start := time.Now()
	m, err := s.opt.Runner(p.File, p.Task, opt)
	if err != nil {
		r.Error = err.Error()
		s.failures++
		s.logf("[%d/%d] %s: FAILED: %v", n, total, r.ID, err)
	} else {
		res := m.Result
		r.N, r.Metrics, r.Seconds, r.Context = res.N, res.Metrics, res.Seconds, res.Context
		r.FileBytes, r.KVBytes = m.FileBytes, res.KVBytes
		r.PeakRSSBytes, r.PeakMemoryBytes, r.MemorySource = res.PeakRSS, res.PeakRSS, m.MemorySource
		r.BytesPerToken, r.FFNBytesPerToken = res.DecodeBytes.Total(), res.DecodeBytes.FFN
		if res.Mass != nil {
			r.Mass = &res.Mass.Total
		}
		key, _ := PrimaryMetric(res.Kind)
		s.logf("[%d/%d] %s: %s %.4g (n=%d, %.1f s)", n, total, r.ID, key, res.Metrics[key], res.N, time.Since(start).Seconds())
	}
	r.Finished = time.Now().UTC().Format(time.RFC3339)
	s.put(&r)
	return s.save()
}

func copyResult(dst, src *Run) {
	dst.N, dst.Metrics, dst.Seconds, dst.Context = src.N, src.Metrics, src.Seconds, src.Context
	dst.FileBytes, dst.KVBytes = src.FileBytes, src.KVBytes
	dst.PeakRSSBytes, dst.PeakMemoryBytes, dst.MemorySource = src.PeakRSSBytes, src.PeakMemoryBytes, src.MemorySource
	dst.BytesPerToken, dst.FFNBytesPerToken, dst.Mass = src.BytesPerToken, src.FFNBytesPerToken, src.Mass
	dst.Finished = src.Finished
}

// ensure makes sure the file of fs exists and matches, converting it if not.
func (s *study) ensure(fs fileSpec) error {
	if fs.kind == FileHF {
		return nil
	}
	path := filepath.Join(s.opt.Out, fs.name())
	if s.ensured[path] {
		return nil
	}
	if err := s.openCheckpoint(); err != nil {
		return err
	}
	if _, err := os.Stat(path); err == nil {
		why := s.check(path, fs)
		if why == "" {
			s.logf("reusing %s", path)
			s.ensured[path] = true
			return nil
		}
		s.logf("converting %s again: %s", path, why)
		// Results computed on the old file are stale.
		kept := s.res.Runs[:0]
		for _, r := range s.res.Runs {
			if r.File != path {
				kept = append(kept, r)
			}
		}
		s.res.Runs = kept
	}
	opt := convert.Options{Gamma: fs.gamma, Delta: fs.delta, FirstLayer: fs.lo, LastLayer: fs.hi, ExplicitRange: true,
		Random: fs.kind != FileSlim, Seed: s.opt.Seed, DType: fs.dtype.DType, Mix: fs.dtype.Mix, Sketch: fs.sketch}
	if fs.recon != recon.None {
		prompts, err := s.calibration()
		if err != nil {
			return err
		}
		opt.Reconstruct = convert.Reconstruct{Method: fs.recon, Prompts: prompts, Tasks: s.opt.ReconstructData, Threads: s.opt.Threads,
			Generate: max(s.opt.ReconstructGenerate, 0)}
	}
	if fs.kind == FileSlim {
		if err := s.readScores(); err != nil {
			return err
		}
		opt.TaskScores, opt.ModelScores = s.taskSc, s.modelSc
		opt.TaskScoresPath, opt.ModelScoresPath = s.opt.TaskScores, s.opt.ModelScores
	}
	start := time.Now()
	rep, err := convert.Convert(s.ck, path, opt)
	if err != nil {
		return fmt.Errorf("study: converting %s: %w", path, err)
	}
	s.logf("converted %s (%d bytes, %.1f s)", path, rep.Bytes, time.Since(start).Seconds())
	s.ensured[path] = true
	return nil
}

// calibration returns (reading once) the reconstruction's calibration
// prompts: the profile split of ReconstructData.
func (s *study) calibration() ([][]int, error) {
	if s.calib != nil {
		return s.calib, nil
	}
	tok, err := tokenizer.Load(s.opt.Model)
	if err != nil {
		return nil, err
	}
	if s.calib, err = recon.Prompts(s.opt.ReconstructData, s.opt.DataDir, max(s.opt.ReconstructLimit, 0), tok); err != nil {
		return nil, err
	}
	return s.calib, nil
}

// openCheckpoint maps the HF checkpoint once (s.ck) and checks it as the
// runs will load it (hf.Checkpoint.Validate, with StudyOptions.Strict, and
// its tokenizer), logging its notes and warnings once, as sinf run and
// convert print them (the conversions and runs that follow would each
// find the same).
func (s *study) openCheckpoint() error {
	if s.ck != nil {
		return nil
	}
	ck, err := hf.Open(s.opt.Model)
	if err != nil {
		return err
	}
	ck.Strict = s.opt.Strict
	if _, err := ck.Validate(); err != nil {
		ck.Close()
		return err
	}
	tok, err := tokenizer.Load(s.opt.Model)
	if err != nil {
		ck.Close()
		return err
	}
	for _, f := range ck.Ignored {
		s.logf("note: %s: %s", s.opt.Model, f)
	}
	for _, f := range ck.Warnings {
		s.logf("warning: %s: %s", s.opt.Model, f)
	}
	for _, f := range tok.Warnings() {
		s.logf("warning: %s", f)
	}
	s.ck = ck
	return nil
}

// sourceDigest is the checkpoint's digest (hf.Checkpoint.Digest, which
// reused files must record), computed once, when a file is checked: it
// reads every weight.
func (s *study) sourceDigest() string {
	if s.digest == "" {
		s.digest = "sha256:" + s.ck.Digest()
	}
	return s.digest
}

// checkScores reads the score files and checks them against the model
// (convert.CheckScores) before the first evaluation, when a slim file is
// still to be converted; else a study whose scores belong to another model
// would fail only after its first runs.
func (s *study) checkScores() error {
	for _, p := range s.plan {
		if _, r := s.find(p.ID); finished(r) && r.Key == p.Key || p.fs.kind != FileSlim {
			continue
		}
		if err := s.openCheckpoint(); err != nil {
			return err
		}
		if err := s.readScores(); err != nil {
			return err
		}
		return convert.CheckScores(s.ck, s.taskSc, s.modelSc, s.opt.TaskScores, s.opt.ModelScores)
	}
	return nil
}

func (s *study) readScores() error {
	if s.taskSc != nil {
		return nil
	}
	var err error
	if s.taskSc, err = scores.Read(s.opt.TaskScores); err != nil {
		return err
	}
	if s.modelSc, err = scores.Read(s.opt.ModelScores); err != nil {
		s.taskSc = nil
		return err
	}
	return nil
}

// sameReconstruction reports whether a file's reconstruction record r is
// what method m on the study's calibration data gives.
func sameReconstruction(r *format.Reconstruction, m recon.Method, o StudyOptions) bool {
	if r == nil || m == recon.None {
		return r == nil && m == recon.None
	}
	return r.Bias == m.HasBias() && r.Refit == m.HasRefit() && slices.Equal(r.Tasks, o.ReconstructData) &&
		r.Generated == max(o.ReconstructGenerate, 0)
}

// check returns why the existing file at path cannot be reused ("" if it can).
func (s *study) check(path string, fs fileSpec) string {
	f, err := format.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if err := f.Verify(); err != nil {
		return err.Error()
	}
	meta := f.Metadata()
	sel := meta.Selection
	switch {
	case sel == nil:
		return "no selection"
	case sel.Gamma != fs.gamma || sel.Delta != fs.delta || sel.FirstLayer != fs.lo || sel.LastLayer != fs.hi:
		return "another selection"
	case sel.Random != (fs.kind != FileSlim) || (sel.Random && sel.Seed != int64(s.opt.Seed)):
		return "another neuron choice"
	case meta.Provenance.SourceDigest != s.sourceDigest():
		return "converted from another checkpoint"
	case fs.dtype.DType != 0 && meta.DType != fs.dtype.FFNDType(s.cfg.Hidden):
		return "another dtype"
	case !sameReconstruction(sel.Reconstruction, fs.recon, s.opt):
		return "another reconstruction"
	case (sel.Predictor != "") != fs.sketch:
		return "another predictor"
	}
	if fs.kind == FileSlim {
		for _, c := range []struct {
			ref  *format.ScoresRef
			path string
		}{{meta.Provenance.TaskScores, s.opt.TaskScores}, {meta.Provenance.ModelScores, s.opt.ModelScores}} {
			d, err := format.DigestFiles(c.path)
			if err != nil {
				return err.Error()
			}
			if c.ref == nil || c.ref.Digest != d {
				return "made from other score files"
			}
		}
	}
	return ""
}
