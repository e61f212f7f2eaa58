package eval_test

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/eval"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/profile"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/rsvgtest"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// writeScores profiles a few prompts of task and writes a raw score file.
func writeScores(t *testing.T, dir, model, data, task string) string {
	t.Helper()
	ck, m, err := hf.Load(model)
	require.NoError(t, err)
	defer ck.Close()
	tok, err := tokenizer.Load(model)
	require.NoError(t, err)
	_, ex, err := dataset.Load(task, data, 6)
	require.NoError(t, err)
	var prompts [][]int
	for _, e := range ex {
		prompts = append(prompts, tok.Encode(e.Prompt, true))
	}
	res, err := profile.Run(m, prompts, profile.Options{MaxNewTokens: 4, Threads: threads, BOS: tok.BOS()})
	require.NoError(t, err)
	f := &scores.File{ModelDigest: scores.ModelDigest(ck.ConfigJSON, convert.FFNShapes(ck)), Task: task, Dataset: task,
		Prompts: res.Prompts, InputTokens: res.InputTokens, GeneratedTokens: res.GeneratedTokens, Scores: res.Sums}
	path := filepath.Join(dir, task+".scores")
	require.NoError(t, scores.Write(path, f))
	return path
}

// counter wraps InProcess and records what it ran.
type counter struct {
	mu   sync.Mutex
	runs []string
}

func (c *counter) run(path, task string, opt eval.Options) (*eval.Measured, error) {
	c.mu.Lock()
	c.runs = append(c.runs, filepath.Base(path)+" "+task+" "+opt.Sparsity.Mode.String())
	c.mu.Unlock()
	return eval.InProcess(path, task, opt)
}

func readResults(t *testing.T, out string) *eval.Results {
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var r eval.Results
	require.NoError(t, json.Unmarshal(b, &r))
	return &r
}

// studyOptions returns a study of the shared tinystories-656k model in a
// temporary folder (task scores of tinystories, model scores of xsum) on the
// given tasks, its runs counted by c, with its model, data and output folders.
func studyOptions(t *testing.T, c *counter, tasks []string, limit int) (opt eval.StudyOptions, model, data, out string) {
	model = sharedtest.Path(t, "models", "tinystories-656k")
	data = sharedtest.Path(t, "data")
	dir := t.TempDir()
	out = filepath.Join(dir, "study")
	opt = eval.StudyOptions{Model: model, TaskScores: writeScores(t, dir, model, data, "tinystories"),
		ModelScores: writeScores(t, dir, model, data, "xsum"), Tasks: tasks, Limit: limit, DataDir: data, Out: out,
		Threads: threads, Context: 128, Runner: c.run, ReconstructLimit: 8}
	return opt, model, data, out
}

func TestStudy(t *testing.T) {
	c := &counter{}
	opt, model, data, out := studyOptions(t, c, []string{"tinystories", "squad_v2"}, 2)
	start := time.Now()
	res, err := eval.Study(opt)
	require.NoError(t, err)
	t.Logf("first study: %d runs executed in %.1f s", len(c.runs), time.Since(start).Seconds())

	// Every planned run finished; the 2-layer model falls back to every
	// layer as its range; the files were converted.
	ids := map[string]*eval.Run{}
	for _, r := range res.Runs {
		require.Empty(t, r.Error, r.ID)
		require.NotEmpty(t, r.Metrics, r.ID)
		ids[r.ID] = r
	}
	for _, row := range []string{"dense", "gamma-dense", "selectinfer", "coreinfer", "coreinfer-selective", "coreinfer-random", "gatefirst",
		"oracle", "gamma-dense-rbias", "gamma-dense-rrefit", "gamma-dense-rboth", "gatefirst-recon", "oracle-recon", "gatefirst-sketch", "oracle-sketch"} {
		for _, task := range opt.Tasks {
			require.Contains(t, ids, "table/"+row+"/"+task)
		}
	}
	for _, id := range []string{"fig10_phi/phi=0.2/tinystories", "fig10_phi/phi=0.7/tinystories", "fig10_gamma/gamma=1/tinystories",
		"fig9_delta/delta=0.1/tinystories", "fig8_layers/L0-1/tinystories", "fig8_layers/L1-2/tinystories", "fig8_layers/L0-2/tinystories",
		"curves/gatefirst-phi=0.1/tinystories", "curves/coreinfer-phi=0.7/tinystories", "curves/gamma-dense-gamma=0.5/tinystories",
		"curves/recon-gamma-dense-gamma=0.5/tinystories"} {
		require.Contains(t, ids, id)
	}
	si := ids["table/selectinfer/tinystories"]
	assert.Equal(t, []any{0, 2, 0.7, 0.3, 0.4, "selectinfer"}, []any{si.FirstLayer, si.LastLayer, si.Gamma, si.Delta, si.Phi, si.Mode})
	assert.Equal(t, 0.2, ids["fig10_phi/phi=0.2/tinystories"].Delta, "δ lowered to φ")
	assert.Equal(t, "table/selectinfer/tinystories", ids["fig10_phi/phi=0.4/tinystories"].ReusedFrom, "an equal configuration is not run twice")
	// GateFirst at SelectInfer's bytes per decoded token: φ = (3·0.4 − 0.7)/2.
	gf, sel := ids["table/gatefirst/tinystories"], ids["table/selectinfer/tinystories"]
	assert.Equal(t, []any{0.25, "gatefirst", 0.0}, []any{gf.Phi, gf.Mode, gf.Alpha})
	assert.Equal(t, "table/gatefirst/tinystories", ids["curves/gatefirst-phi=0.25/tinystories"].ReusedFrom)
	// Bytes per decoded token, N=384 neurons × hidden 128 × 4 bytes a row, 2 layers:
	// SelectInfer 154 neurons × 3 rows, GateFirst 269 gate rows + 2 × 96.
	assert.Equal(t, int64(2*154*3*128*4), sel.FFNBytesPerToken)
	assert.Equal(t, int64(2*(269+2*96)*128*4), gf.FFNBytesPerToken)
	// The oracle reads every stored row (a bound); the reconstructed rows
	// run on their files, which record the reconstruction.
	assert.Equal(t, int64(2*269*3*128*4), ids["table/oracle/tinystories"].FFNBytesPerToken)
	assert.Equal(t, "oracle", ids["table/oracle-recon/tinystories"].Mode)
	// The sketch rows pay for the sketch (10 bytes per 32 weights of each
	// stored up_proj row, 40 a row here) out of φ: (3·0.4 − 0.7·(1 + 10/128))/2
	// = 0.22265625 is 85.5 rows, lowered to 85 (φ = 85/384); the oracle runs
	// at the same count.
	gs, ok := ids["table/gatefirst-sketch/tinystories"], ids["table/oracle-sketch/tinystories"]
	assert.Equal(t, []any{0.221354167, "gatefirst", 0.221354167, "oracle"}, []any{gs.Phi, gs.Mode, ok.Phi, ok.Mode})
	assert.Equal(t, int64(2*(269*128*4+269*40+2*85*128*4)), gs.FFNBytesPerToken)
	assert.LessOrEqual(t, gs.FFNBytesPerToken, gf.FFNBytesPerToken)
	sk, err := format.Open(gs.File)
	require.NoError(t, err)
	assert.Equal(t, "up_sketch", sk.Metadata().Selection.Predictor)
	assert.NotNil(t, sk.Metadata().Selection.Reconstruction)
	sk.Close()
	for id, m := range map[string][2]bool{"gamma-dense-rbias": {true, false}, "gamma-dense-rrefit": {false, true}, "gamma-dense-rboth": {true, true}} {
		f, err := format.Open(ids["table/"+id+"/tinystories"].File)
		require.NoError(t, err)
		r := f.Metadata().Selection.Reconstruction
		require.NotNil(t, r, id)
		assert.Equal(t, m, [2]bool{r.Bias, r.Refit}, id)
		assert.Equal(t, []string{"tinystories"}, r.Tasks, id)
		f.Close()
	}
	for _, f := range []string{"results.json", "table.md", "fig10_phi.svg", "fig10_gamma.svg", "fig9_delta.svg", "fig8_layers.svg", eval.CurvesFile,
		"slim-g0.70-d0.30-L0-2.sinf", "random-g0.70-L0-2.sinf", "full-L0-2.sinf"} {
		st, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, f)
		assert.Positive(t, st.Size(), f)
	}
	// Each figure as a viewer draws it (rsvg-convert, when installed):
	// nothing touches the left or right edge (the legend and the title were
	// cut at the right), and the curve is drawn.
	for _, f := range []string{"fig10_phi.svg", "fig10_gamma.svg", "fig9_delta.svg", "fig8_layers.svg"} {
		img, ok := rsvgtest.Render(t, filepath.Join(out, f))
		if !ok {
			break
		}
		w, h := img.Bounds().Dx(), img.Bounds().Dy()
		assert.True(t, rsvgtest.Blank(img, image.Rect(w-4, 0, w, h)), "%s: something touches the right edge", f)
		assert.True(t, rsvgtest.Blank(img, image.Rect(0, 0, 2, h)), "%s: something touches the left edge", f)
		assert.Greater(t, rsvgtest.Hues(img, image.Rect(w/10, h/10, w*9/10, h*9/10)), 4, "%s: no curve drawn", f)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	require.NoError(t, err)
	assert.Contains(t, string(table), "| SelectInfer (γ=0.7, δ=0.3, φ=0.4) |")
	assert.Contains(t, string(table), "tinystories (PPL ↓)")
	assert.Contains(t, string(table), "squad_v2 (EM / F1)")
	assert.NotContains(t, string(table), "| – |")
	t.Logf("table.md:\n%s", table)

	// The dense row is Evaluate on the HF folder, exactly.
	l, err := eval.Open(model)
	require.NoError(t, err)
	defer l.Close()
	for _, task := range opt.Tasks {
		want, err := eval.Evaluate(l.Model, l.Tok, task, eval.Options{DataDir: data, Limit: 2, Threads: threads, Context: 128})
		require.NoError(t, err)
		assert.Equal(t, want.Metrics, ids["table/dense/"+task].Metrics, task)
	}
	// Slower sparse rows differ from dense on perplexity.
	assert.NotEqual(t, ids["table/dense/tinystories"].Metrics, ids["table/coreinfer-random/tinystories"].Metrics)

	// Resume: nothing left to do, nothing converted again.
	slim := filepath.Join(out, "slim-g0.70-d0.30-L0-2.sinf")
	before, err := os.Stat(slim)
	require.NoError(t, err)
	c.runs = nil
	_, err = eval.Study(opt)
	require.NoError(t, err)
	assert.Empty(t, c.runs)
	after, err := os.Stat(slim)
	require.NoError(t, err)
	assert.Equal(t, before.ModTime(), after.ModTime())

	// Resume after removing one run from results.json: only it runs again.
	r := readResults(t, out)
	kept := r.Runs[:0]
	for _, run := range r.Runs {
		if run.ID != "table/coreinfer-random/squad_v2" {
			kept = append(kept, run)
		}
	}
	require.Len(t, kept, len(r.Runs)-1)
	r.Runs = kept
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "results.json"), b, 0o644))
	c.runs = nil
	res2, err := eval.Study(opt)
	require.NoError(t, err)
	assert.Equal(t, []string{"random-g0.70-L0-2.sinf squad_v2 coreinfer"}, c.runs)
	assert.Len(t, res2.Runs, len(res.Runs))

	// A changed limit makes every run stale.
	c.runs = nil
	opt.Limit, opt.NoSweeps, opt.Tasks = 1, true, []string{"tinystories"}
	_, err = eval.Study(opt)
	require.NoError(t, err)
	assert.Len(t, c.runs, 15)

	// A damaged file is converted again when runs need it.
	require.NoError(t, os.WriteFile(slim, []byte("not a sinf file"), 0o644))
	c.runs = nil
	opt.Limit = 2
	_, err = eval.Study(opt)
	require.NoError(t, err)
	assert.Len(t, c.runs, 15, strings.Join(c.runs, "; "))
	f, err := format.Open(slim)
	require.NoError(t, err)
	assert.NoError(t, f.Verify())
	f.Close()
}

func TestStudyBadInput(t *testing.T) {
	model := sharedtest.Path(t, "models", "tinystories-656k")
	data := sharedtest.Path(t, "data")
	dir := t.TempDir()
	sc := filepath.Join(dir, "x.scores")
	require.NoError(t, os.WriteFile(sc, nil, 0o644))
	base := eval.StudyOptions{Model: model, TaskScores: sc, ModelScores: sc, DataDir: data, Out: filepath.Join(dir, "out")}

	o := base
	o.Tasks = []string{"tinystories", "nope"}
	_, err := eval.Study(o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown task "nope"`)

	o = base
	o.Tasks, o.DataDir = []string{"xsum"}, dir
	_, err = eval.Study(o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "xsum", "test-sample.jsonl"))

	o = base
	o.TaskScores = filepath.Join(dir, "missing.scores")
	_, err = eval.Study(o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.scores")

	o = base
	o.FirstLayer, o.LastLayer, o.ExplicitRange = 3, 5, true
	_, err = eval.Study(o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "layer range")
}

// TestStudyDTypes: with DTypes, the study converts Q8_0 and Q4_0 files and
// adds the dtype table (the paper's Table 4 layout); the Q8_0 dense run's
// perplexity is within 1% of the F32 checkpoint's, and the files hold the
// dtype.
func TestStudyDTypes(t *testing.T) {
	c := &counter{}
	opt, _, _, out := studyOptions(t, c, []string{"tinystories"}, 4)
	opt.NoSweeps, opt.DTypes = true, []convert.Recipe{{DType: format.Q8_0}, {DType: format.Q4_0}, {DType: format.Q8_0}} // a repeat is dropped
	res, err := eval.Study(opt)
	require.NoError(t, err)
	ids := map[string]*eval.Run{}
	for _, r := range res.Runs {
		require.Empty(t, r.Error, r.ID)
		ids[r.ID] = r
	}
	for _, d := range []string{"q8_0", "q4_0"} {
		for _, row := range []string{"dense", "gamma-dense", "selectinfer"} {
			require.Contains(t, ids, "table4_dtype/"+row+"-"+d+"/tinystories")
		}
	}
	dense := ids["table/dense/tinystories"].Metrics["perplexity"]
	q8 := ids["table4_dtype/dense-q8_0/tinystories"].Metrics["perplexity"]
	require.InDelta(t, dense, q8, 0.01*dense, "Q8_0 dense perplexity %g against F32 %g", q8, dense)
	for name, want := range map[string]format.DType{"full-L0-2-q8_0.sinf": format.Q8_0, "slim-g0.70-d0.30-L0-2-q4_0.sinf": format.Q4_0} {
		f, err := format.Open(filepath.Join(out, name))
		require.NoError(t, err)
		require.Equal(t, want, f.Metadata().DType, name)
		f.Close()
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	require.NoError(t, err)
	require.Contains(t, string(table), "## Stored dtype")
	require.Contains(t, string(table), "| SelectInfer (γ=0.7, δ=0.3, φ=0.4), Q4_0 |")
	require.Equal(t, 1, strings.Count(string(table), "| Dense, Q8_0 |"))
	require.Len(t, res.Runs, 15+2*3) // the 15 table rows on one task, and three per dtype (Q8_0 once)
}

// TestStudyMassCurves: with Mass, every sparse run carries the activation
// mass (computed ≤ best ≤ 1, random = computed/loaded neurons) and the
// bytes table shows it; with Figures "png" the figures are PNG images.
func TestStudyMassCurves(t *testing.T) {
	c := &counter{}
	opt, _, _, out := studyOptions(t, c, []string{"tinystories"}, 2)
	opt.Mass, opt.Figures = true, "png"
	res, err := eval.Study(opt)
	require.NoError(t, err)
	for _, r := range res.Runs {
		require.Empty(t, r.Error, r.ID)
		if r.Mode == "dense" {
			require.Nil(t, r.Mass, r.ID)
			continue
		}
		require.NotNil(t, r.Mass, r.ID)
		m := r.Mass
		require.True(t, 0 < m.Mass && m.Mass <= m.Best+1e-12 && m.Best <= 1+1e-12, "%s: %+v", r.ID, *m)
		require.InDelta(t, float64(m.Computed)/float64(m.Loaded), m.Random, 1e-12, r.ID)
	}
	var gf *eval.Run
	for _, r := range res.Runs {
		if r.ID == "table/gatefirst/tinystories" {
			gf = r
		}
	}
	require.NotNil(t, gf, "no gatefirst row")
	require.Equal(t, 2*96, gf.Mass.Computed) // φ=0.25 of N=384 in each of 2 layers
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	require.NoError(t, err)
	require.Contains(t, string(table), "| perplexity | mass | best | random |")
	require.Contains(t, string(table), "![curves](curves.png)")
	for _, f := range []string{"curves.png", "fig10_phi.png", "fig8_layers.png"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		require.NoError(t, err)
		img, err := png.Decode(bytes.NewReader(b))
		require.NoError(t, err, f)
		require.Greater(t, img.Bounds().Dx(), 500, f)
	}
	if dir := os.Getenv("SINF_STUDY_FIGURES"); dir != "" { // to look at them
		for _, f := range []string{"curves.png", "fig10_phi.png"} {
			b, _ := os.ReadFile(filepath.Join(out, f))
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
		}
	}
}
