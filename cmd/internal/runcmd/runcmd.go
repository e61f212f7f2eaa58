// Package runcmd is the text-generation command shared by `sinf run` and the
// device binary `sinf-run`: flags, model opening, streaming output and the
// --json report. It imports only format, runtime and the tokenizer, so
// sinf-run never links the converter.
package runcmd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/constrain"
	"github.com/selectinfer/sinf/runtime/kernels"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// Loaded is a model ready to run.
type Loaded struct {
	Model       *runtime.Model
	Tok         *tokenizer.Tokenizer
	Kind        string // "sinf" or "hf"
	Path        string
	FileBytes   int64 // bytes of the weights file(s)
	MappedBytes int64 // bytes memory-mapped
	Meta        *format.Metadata
	Gen         runtime.GenerationConfig // generation_config.json (zero when absent)
	Close       func() error
}

// EOS returns the ids generation stops at: the union of
// generation_config.json's eos_token_id, config.json's and
// tokenizer_config.json's eos_token (runtime.EOSUnion).
func (l *Loaded) EOS() []int {
	return runtime.EOSUnion(l.Gen.EOS, l.Model.Config.EOS, l.Tok.EOS())
}

// Opener opens a model path (sinf-run: .sinf only; sinf: also HF folders).
type Opener func(path string, verify bool) (*Loaded, error)

// OpenSinf maps a .sinf file, optionally verifies every checksum, and builds
// the model and its embedded tokenizer.
func OpenSinf(path string, verify bool) (*Loaded, error) {
	return OpenSinfWith(path, runtime.OpenOptions{Verify: verify})
}

// OpenSinfWith is OpenSinf with runtime.OpenOptions (--no-mmap reads the
// file into memory: MappedBytes 0).
func OpenSinfWith(path string, o runtime.OpenOptions) (*Loaded, error) {
	if err := NotFolder(path); err != nil {
		return nil, err
	}
	m, tok, f, err := runtime.OpenFile(path, o)
	if err != nil {
		return nil, err
	}
	meta := f.Metadata()
	gen, err := runtime.ParseGenerationConfig(path+": metadata field generation_config", meta.GenerationConfig)
	if err != nil {
		f.Close()
		return nil, err
	}
	mapped := f.Size()
	if o.NoMmap {
		mapped = 0
	}
	return &Loaded{Model: m, Tok: tok, Kind: "sinf", Path: path, FileBytes: f.Size(), MappedBytes: mapped, Meta: &meta, Gen: gen, Close: f.Close}, nil
}

// NotFolder refuses a folder where a .sinf file is expected, naming an HF
// checkpoint folder as such with the commands that take one (opening it
// says only "not a regular file").
func NotFolder(path string) error {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return nil
	}
	if _, err := os.Stat(filepath.Join(path, "config.json")); err == nil {
		return fmt.Errorf("%s is an HF checkpoint folder: this takes a .sinf file; make one with sinf convert, or run the folder with sinf run", path)
	}
	return fmt.Errorf("%s is a folder: this takes a .sinf file", path)
}

// Flags are the run flags common to sinf run and sinf-run.
func Flags() []cli.Flag {
	return slices.Concat(SparsityFlags(), []cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "model: a .sinf file (or, for sinf run, an HF checkpoint folder)", Required: true},
		&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "prompt text (-: read it from standard input)"},
		&cli.StringFlag{Name: "prompt-file", Usage: "read the prompt from this file"},
		&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Value: 128, Usage: "tokens to generate at most"},
		&cli.Float64Flag{Name: "temperature", Value: 0, Usage: "sampling temperature; 0 is greedy (default: generation_config.json's when it sets do_sample, else 0)"},
		&cli.IntFlag{Name: "top-k", Value: 0, Usage: "sample from the k most likely tokens (0: all; default: generation_config.json's when it sets do_sample)"},
		&cli.Float64Flag{Name: "top-p", Value: 1, Usage: "nucleus sampling probability mass (1: off; default: generation_config.json's when it sets do_sample)"},
		&cli.Uint64Flag{Name: "seed", Value: 0, Usage: "sampling seed"},
	}, PenaltyFlags(), []cli.Flag{
		&cli.BoolFlag{Name: "logprobs", Usage: "--json: report each generated token's log probability (the model's, before penalties, temperature and cuts)"},
		&cli.IntFlag{Name: "top-logprobs", Usage: "--json with --logprobs: also the N most likely tokens' at each position"},
		&cli.StringFlag{Name: "format", Usage: "constrain the output to JSON: 'json' for any JSON object, or a JSON Schema file (OpenAI strict mode's subset: runtime/constrain)"},
		&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: ThreadsUsage},
		&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu, or cuda (a build with -tags cuda: make cuda)"},
		&cli.BoolFlag{Name: "mapped", Usage: "cuda: run on the registered mapped file even on a discrete GPU"},
		&cli.IntFlag{Name: "context", Usage: "KV cache positions (0: what the run needs, the prompt's tokens + --max-tokens, at most the model's max_position_embeddings or sliding window)"},
		KVCacheFlag(),
		&cli.BoolFlag{Name: "no-bos", Usage: "do not add the BOS token even if the tokenizer config asks for it"},
		&cli.BoolFlag{Name: "verify", Usage: "check every tensor checksum before running (without it, a .sinf file is checked on its first open only: the files that passed are remembered by identity in $SINF_VERIFY_CACHE, else ~/.cache/sinf/verified)"},
		&cli.BoolFlag{Name: "no-mmap", Usage: "read the .sinf file into memory instead of mapping it (for network or FUSE filesystems, or a file that may change while running)"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of streaming text"},
	})
}

// PenaltyFlags are --min-p and the repetition penalties with their window,
// read by SamplingFlags; sinf run, sinf-run, serve and chat share them.
func PenaltyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Float64Flag{Name: "min-p", Usage: "keep only tokens with probability ≥ min-p × the most likely one's, after temperature (0: off)"},
		&cli.Float64Flag{Name: "repeat-penalty", Value: 1, Usage: "divide a positive logit (multiply a negative one) of each token in the last --repeat-last-n by this, as HF's repetition_penalty (1: off)"},
		&cli.IntFlag{Name: "repeat-last-n", Value: runtime.DefaultPenaltyLastN, Usage: "the penalties' window: the last N tokens, prompt included (0: penalties off, -1: the whole sequence, as HF)"},
		&cli.Float64Flag{Name: "presence-penalty", Usage: "subtract this from the logit of each token in the window (OpenAI's presence_penalty, -2 to 2)"},
		&cli.Float64Flag{Name: "frequency-penalty", Usage: "subtract this times its count in the window from each token's logit (OpenAI's frequency_penalty, -2 to 2)"},
	}
}

// SparsityFlags are --mode, --phi and --alpha, read by Sparsity; sinf run,
// sinf-run, bench and eval share them.
func SparsityFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mode", Usage: "gatefirst, selectinfer, coreinfer, dense, or oracle (a CPU bound: the top φ·N by true |a| per token, reading every row) (default: gatefirst for a .sinf file that drops neurons, else dense)"},
		&cli.Float64Flag{Name: "phi", Value: runtime.DefaultSparsity.Phi, Usage: "phi: fraction of N computed per decode step in sliced layers; gatefirst computes every stored gate row and phi·N up and down rows, and defaults to the phi that reads what selectinfer reads at 0.4, (3·0.4 − gamma)/2 (0.25 on a gamma 0.7 file)"},
		&cli.Float64Flag{Name: "alpha", Value: runtime.DefaultSparsity.Alpha, Usage: "alpha: fraction of each prompt token's positive activations counted"},
	}
}

// Report is the --json output.
type Report struct {
	PromptIDs         []int      `json:"prompt_ids"`
	IDs               []int      `json:"ids"`
	Text              string     `json:"text"`
	PrefillTokensPerS float64    `json:"prefill_tokens_per_s"`
	DecodeTokensPerS  float64    `json:"decode_tokens_per_s"`
	PeakRSSBytes      int64      `json:"peak_rss_bytes"`
	Mode              string     `json:"mode"`
	Phi               float64    `json:"phi,omitempty"` // φ of a sparse mode
	LoadedNeurons     []int      `json:"loaded_neurons"`
	ComputedNeurons   []int      `json:"computed_neurons"`
	MappedBytes       int64      `json:"mapped_bytes"`
	Device            DeviceInfo `json:"device"`
	// FinishReason says why generation stopped: "eos" (the model emitted
	// an end-of-sequence id, kept in ids), "length" (--max-tokens) or
	// "context" (the KV cache was full: raise --context) or "interrupted"
	// (Ctrl-C: the report and the timings are printed all the same).
	FinishReason string `json:"finish_reason"`
	// Logprobs (with --logprobs): per generated token, its natural-log
	// probability under the model and the --top-logprobs most likely.
	Logprobs []TokenLogprobs `json:"logprobs,omitempty"`
}

// TokenLogprobs is one position of Report.Logprobs.
type TokenLogprobs struct {
	ID      int            `json:"id"`
	Token   string         `json:"token"` // the bytes it adds to the text (a special token: its piece)
	Logprob float64        `json:"logprob"`
	Top     []TokenLogprob `json:"top_logprobs"`
}

// TokenLogprob is one of the most likely tokens at a position.
type TokenLogprob struct {
	ID      int     `json:"id"`
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
}

func tokenLogprobs(l *Loaded, lp runtime.Logprobs) TokenLogprobs {
	text := func(id int) string {
		if b := l.Tok.TokenBytes(id); b != nil {
			return string(b)
		}
		return l.Tok.Token(id)
	}
	t := TokenLogprobs{ID: lp.Chosen.ID, Token: text(lp.Chosen.ID), Logprob: lp.Chosen.Logprob, Top: []TokenLogprob{}}
	for _, e := range lp.Top {
		t.Top = append(t.Top, TokenLogprob{ID: e.ID, Token: text(e.ID), Logprob: e.Logprob})
	}
	return t
}

// finishReason derives Report.FinishReason from a generation's result, as
// Session.Generate stops: EOS first, then the token limit, else the end of
// the context.
func finishReason(res runtime.Result, eos []int, maxTokens int) string {
	switch {
	case len(res.IDs) > 0 && slices.Contains(eos, res.IDs[len(res.IDs)-1]):
		return "eos"
	case len(res.IDs) >= maxTokens:
		return "length"
	}
	return "context"
}

// DeviceInfo says where a run computed: "cpu" with its threads, or "cuda"
// with the GPU and the weight path taken (registered mapped file, managed
// copy, or device copy).
type DeviceInfo struct {
	Name    string `json:"name"`
	Threads int    `json:"threads,omitempty"`
	GPU     string `json:"gpu,omitempty"`
	Weights string `json:"weights,omitempty"`
}

// DeviceOptions configure a backend.
type DeviceOptions struct {
	Threads int  // CPU kernel threads (0: kernels.DefaultThreads)
	Context int  // KV cache positions (0: runtime.NewSession's default)
	Mapped  bool // cuda: use the registered mapped file on a discrete GPU too
}

// Backend is a generator with resources to release.
type Backend interface {
	runtime.Generator
	Close()
}

// devices holds the non-CPU backends compiled in (cuda registers itself in a
// file built with -tags cuda).
var devices = map[string]func(l *Loaded, o DeviceOptions) (Backend, DeviceInfo, error){}

// RegisterDevice adds a backend under a --device name.
func RegisterDevice(name string, open func(l *Loaded, o DeviceOptions) (Backend, DeviceInfo, error)) {
	devices[name] = open
}

type cpuBackend struct {
	*runtime.Session
	pool *kernels.Pool
}

func (b cpuBackend) Close() { b.pool.Close() }

// NewGenerator opens the named device's backend for a loaded model. The CPU
// is always there; "cuda" only in a build with -tags cuda, else the error
// says so.
func NewGenerator(device string, l *Loaded, o DeviceOptions) (Backend, DeviceInfo, error) {
	switch device {
	case "", "cpu":
		pool := kernels.NewPool(o.Threads)
		return cpuBackend{l.Model.NewSession(pool, o.Context), pool}, DeviceInfo{Name: "cpu", Threads: pool.Threads()}, nil
	}
	if open, ok := devices[device]; ok {
		return open(l, o)
	}
	if device == "cuda" {
		return nil, DeviceInfo{}, errors.New("--device cuda: this binary was built without CUDA support; build it with make cuda (go build -tags cuda)")
	}
	return nil, DeviceInfo{}, fmt.Errorf("--device %q: unknown device (want cpu or cuda)", device)
}

// Action returns the run command's action over an opener.
func Action(open Opener) cli.ActionFunc {
	return func(c *cli.Context) error {
		prompt, err := promptText(c)
		if err != nil {
			return err
		}
		if err := checkFlags(c); err != nil {
			return err
		}
		l, err := openRun(c, open)
		if err != nil {
			return err
		}
		defer l.Close()
		if err := CheckContext(c, l.Model); err != nil {
			return err
		}
		if err := SetKVCache(c, l.Model); err != nil {
			return err
		}
		sp, err := Sparsity(c, l.Model)
		if err != nil {
			return err
		}
		ids, err := l.Tok.EncodeChecked(prompt, l.Tok.AddsBOS() && !c.Bool("no-bos"))
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return errors.New("the prompt encodes to no tokens")
		}
		ctx, err := RunContext(l.Model.Config, c.Int("context"), len(ids), c.Int("max-tokens"))
		if err != nil {
			return err
		}
		s, info, err := NewGenerator(c.String("device"), l, DeviceOptions{Threads: c.Int("threads"), Context: ctx, Mapped: c.Bool("mapped")})
		if err != nil {
			return err
		}
		defer s.Close()
		if len(ids) >= s.Context() {
			return fmt.Errorf("the prompt is %d tokens, the context %d: shorten it (or raise --context up to %s)", len(ids), s.Context(), maxContextName(l.Model.Config))
		}
		eos := l.EOS()
		sam := SamplingFlags(c, l.Gen.Sampling())
		if err := sam.Check(FlagName); err != nil {
			return err
		}
		sampler := runtime.NewSamplerParams(sam, c.Uint64("seed"))
		sampler.Logprobs, sampler.TopLogprobs = c.Bool("logprobs"), c.Int("top-logprobs")
		if sampler.Constraint, err = formatFlag(c, l, eos); err != nil {
			return err
		}
		var lps []TokenLogprobs
		out := bufio.NewWriter(c.App.Writer)
		dec := l.Tok.NewDecoder()
		asJSON := c.Bool("json")
		var text strings.Builder
		opt := runtime.GenerateOptions{
			MaxTokens: c.Int("max-tokens"),
			Sampler:   sampler,
			Sparsity:  sp,
			EOS:       eos,
			OnToken: func(id int) {
				if sampler.Logprobs {
					lps = append(lps, tokenLogprobs(l, sampler.Last()))
				}
				piece := dec.Add(id)
				text.WriteString(piece)
				if !asJSON {
					out.WriteString(piece)
					out.Flush()
				}
			},
		}
		sig := make(chan os.Signal, 1)
		notifyInterrupt(sig)
		interrupted := false
		opt.Stop = func() bool {
			select {
			case <-sig:
				interrupted = true
			default:
			}
			return interrupted
		}
		res, err := s.Generate(ids, opt)
		stopInterrupt(sig)
		if err != nil {
			return err
		}
		rest := dec.Flush()
		text.WriteString(rest)
		rep := Report{PromptIDs: res.PromptIDs, IDs: res.IDs, Text: text.String(),
			PrefillTokensPerS: res.PrefillTokensPerS, DecodeTokensPerS: res.DecodeTokensPerS,
			PeakRSSBytes: runtime.PeakRSS(), Mode: sp.Mode.String(), LoadedNeurons: res.LoadedNeurons,
			ComputedNeurons: res.ComputedNeurons, MappedBytes: l.MappedBytes, Device: info,
			FinishReason: finishReason(res, eos, opt.MaxTokens), Logprobs: lps}
		if interrupted {
			rep.FinishReason = "interrupted"
			defer fmt.Fprintf(c.App.ErrWriter, "note: interrupted (Ctrl-C) after %s\n", Plural(len(res.IDs), "token"))
		}
		if rep.IDs == nil {
			rep.IDs = []int{}
		}
		if sp.Mode != runtime.Dense {
			rep.Phi = sp.Phi
		}
		if asJSON {
			if err := json.NewEncoder(c.App.Writer).Encode(rep); err != nil {
				return err
			}
		} else {
			out.WriteString(rest + "\n")
			out.Flush()
		}
		if rep.FinishReason == "context" {
			fmt.Fprintf(c.App.ErrWriter, "note: generation stopped at the end of the context (%d positions) after %s; raise --context for more\n",
				s.Context(), Plural(len(res.IDs), "token"))
		}
		if !asJSON {
			Summary(c.App.ErrWriter, l, rep)
		}
		return nil
	}
}

// SamplingFlags returns def (the file's generation_config defaults) with
// each of --temperature, --top-k and --top-p that the command line sets in
// its place.
func SamplingFlags(c *cli.Context, def runtime.SamplingParams) runtime.SamplingParams {
	if c.IsSet("temperature") {
		def.Temperature = c.Float64("temperature")
	}
	if c.IsSet("top-k") {
		def.TopK = c.Int("top-k")
	}
	if c.IsSet("top-p") {
		def.TopP = c.Float64("top-p")
	}
	if c.IsSet("min-p") {
		def.MinP = c.Float64("min-p")
	}
	if c.IsSet("repeat-penalty") {
		def.RepeatPenalty = c.Float64("repeat-penalty")
	}
	if c.IsSet("repeat-last-n") {
		def.PenaltyLastN = c.Int("repeat-last-n")
	}
	if c.IsSet("presence-penalty") {
		def.PresencePenalty = c.Float64("presence-penalty")
	}
	if c.IsSet("frequency-penalty") {
		def.FrequencyPenalty = c.Float64("frequency-penalty")
	}
	return def
}

// notifyInterrupt and stopInterrupt route Ctrl-C (SIGINT) to a channel while
// a run generates, so that it stops at the next token and prints its
// report; tests replace them.
var (
	notifyInterrupt = func(c chan<- os.Signal) { signal.Notify(c, os.Interrupt) }
	stopInterrupt   = func(c chan<- os.Signal) { signal.Stop(c) }
)

// formatFlag returns --format's constraint: nil without the flag.
func formatFlag(c *cli.Context, l *Loaded, eos []int) (runtime.Constraint, error) {
	f := c.String("format")
	if f == "" {
		return nil, nil
	}
	node := constrain.JSONObject()
	if f != "json" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--format: %w", err)
		}
		if node, err = constrain.Compile(f, b); err != nil {
			return nil, fmt.Errorf("--format: %w", err)
		}
	}
	v := constrain.NewVocab(l.Model.Config.Vocab, l.Tok.TokenBytes)
	if m := v.Missing(); m != "" {
		return nil, fmt.Errorf("--format: this model's vocabulary has no token for %q, so it cannot write JSON", m)
	}
	return constrain.NewMatcher(node, v, eos), nil
}

// FlagName spells a SamplingParams field as its flag: "top_p" → "--top-p".
func FlagName(field string) string { return "--" + strings.ReplaceAll(field, "_", "-") }

// openRun opens --model: a .sinf file with its checksums verified on its
// first open (runtime.DefaultVerifyCache remembers the files that passed;
// --verify checks every time) and, with --no-mmap, read into memory; a
// folder with open (an HF checkpoint, always mapped, so --no-mmap is refused
// there).
func openRun(c *cli.Context, open Opener) (*Loaded, error) {
	path := c.String("model")
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		if c.Bool("no-mmap") && err == nil && fi.IsDir() {
			return nil, fmt.Errorf("--no-mmap: %s is a folder; it reads a .sinf file into memory (an HF checkpoint is always mapped)", path)
		}
		return open(path, c.Bool("verify"))
	}
	return OpenSinfWith(path, runtime.OpenOptions{Verify: c.Bool("verify"), NoMmap: c.Bool("no-mmap"), Cache: runtime.DefaultVerifyCache()})
}

// Sparsity reads --mode, --phi and --alpha and validates them against m.
// Without --mode, a model with a sliced layer that drops neurons runs
// gatefirst; any other runs dense, and a file whose sliced layers keep
// every neuron (γ = 1, the dense baseline) says so on the error stream.
func Sparsity(c *cli.Context, m *runtime.Model) (runtime.Sparsity, error) {
	sp := runtime.Sparsity{Phi: c.Float64("phi"), Alpha: c.Float64("alpha")}
	mode := c.String("mode")
	if mode == "" {
		mode = "dense"
		if fileGamma(m) < 1 {
			mode = "gatefirst"
		} else if slices.ContainsFunc(m.Layers, func(l runtime.Layer) bool { return l.MLP.Sliced }) {
			fmt.Fprintln(c.App.ErrWriter, "note: the file keeps every FFN neuron of its sliced layers (gamma 1), so it runs dense; give --mode selectinfer or coreinfer for sparse decode")
		}
	}
	var err error
	if sp.Mode, err = runtime.ParseMode(mode); err != nil {
		return sp, err
	}
	sp.Phi = ModePhi(c, m, sp.Mode)
	if err := sp.Validate(m); err != nil {
		return sp, err
	}
	return sp, nil
}

// ModePhi is mode's φ on m: --phi where it is set, else its default (0.4),
// but for GateFirst what selectinfer reads at that φ (0.25 on a γ=0.7
// file; a file with up_proj sketches reads them too, and their bytes come
// off φ), at least 0.05. The server gives it to a request that names a mode
// and no phi.
func ModePhi(c *cli.Context, m *runtime.Model, mode runtime.Mode) float64 {
	phi := c.Float64("phi")
	if mode != runtime.GateFirst || c.IsSet("phi") {
		return phi
	}
	return max(gateFirstPhi(m, fileGamma(m), phi), 0.05)
}

// fileGamma is m's γ: the share of FFN neurons the first sliced layer that
// drops any keeps, or 1 where none drops any.
func fileGamma(m *runtime.Model) float64 {
	for i := range m.Layers {
		if f := &m.Layers[i].MLP; f.Sliced && f.Kept() < m.Config.Intermediate {
			return float64(f.Kept()) / float64(m.Config.Intermediate)
		}
	}
	return 1
}

// gateFirstPhi is GateFirst's φ at what selectinfer reads at phi from m, a
// γ file: GateFirstPhi, or GateFirstSketchPhi when its layers store up_proj
// sketches.
func gateFirstPhi(m *runtime.Model, gamma, phi float64) float64 {
	if share := runtime.ModelSketchShare(m); share > 0 {
		return runtime.GateFirstSketchPhi(gamma, phi, share, m.Config.Intermediate)
	}
	return runtime.GateFirstPhi(gamma, phi)
}

// ContextZero says what --context 0 means in eval and study (run and
// sinf-run size the KV cache for the run: RunContext).
const ContextZero = "0: the model's max_position_embeddings, at most 4096"

// KVCacheFlag is --kv-cache, read by SetKVCache; sinf-run, serve, chat and
// sinf bench share it.
func KVCacheFlag() cli.Flag {
	return &cli.StringFlag{Name: "kv-cache", Value: "f32", Usage: "KV cache element type on the CPU: f32, or f16 (half the cache's memory and the bytes attention reads a token, at F16's precision, as llama.cpp's default)"}
}

// SetKVCache sets m's KV cache dtype from --kv-cache (runtime.Model.KVCache)
// for the sessions made after it; an unknown name, or f16 on a device other
// than the CPU (whose backend keeps its own cache), is an error.
func SetKVCache(c *cli.Context, m *runtime.Model) error {
	d, err := KVCache(c)
	if err != nil {
		return err
	}
	if dev := c.String("device"); d == format.F16 && dev != "" && dev != "cpu" {
		return fmt.Errorf("--kv-cache f16: the CPU's; --device %s keeps its own cache", dev)
	}
	m.KVCache = d
	return nil
}

// KVCache returns --kv-cache's dtype: format.F32 for f32, format.F16 for
// f16, an error naming the flag otherwise.
func KVCache(c *cli.Context) (format.DType, error) {
	switch v := c.String("kv-cache"); v {
	case "f32", "":
		return format.F32, nil
	case "f16":
		return format.F16, nil
	default:
		return 0, fmt.Errorf("--kv-cache %q: want f32 or f16", v)
	}
}

// CheckContext refuses a --context above the model's max_position_embeddings
// (positions the model was not trained for; the session would otherwise
// clamp it without a word).
func CheckContext(c *cli.Context, m *runtime.Model) error {
	if n, most := c.Int("context"), m.Config.MaxPositions; n > most {
		return fmt.Errorf("--context %d: above the model's max_position_embeddings %d", n, most)
	}
	return nil
}

// checkFlags rejects out-of-range sampling and resource flags.
func checkFlags(c *cli.Context) error {
	if err := CheckThreads(c); err != nil {
		return err
	}
	switch {
	case c.Int("max-tokens") < 0:
		return fmt.Errorf("--max-tokens %d: want ≥ 0", c.Int("max-tokens"))
	case c.Int("context") < 0:
		return fmt.Errorf("--context %d: want ≥ 0 (0: what the run needs)", c.Int("context"))
	case !(c.Float64("temperature") >= 0):
		return fmt.Errorf("--temperature %g: want ≥ 0 (0: greedy)", c.Float64("temperature"))
	case c.Int("top-k") < 0:
		return fmt.Errorf("--top-k %d: want ≥ 0 (0: no cut)", c.Int("top-k"))
	case !(c.Float64("top-p") > 0 && c.Float64("top-p") <= 1):
		return fmt.Errorf("--top-p %g: want a probability in (0, 1]", c.Float64("top-p"))
	case c.Int("top-logprobs") < 0 || c.Int("top-logprobs") > 20:
		return fmt.Errorf("--top-logprobs %d: want 0 to 20", c.Int("top-logprobs"))
	case c.IsSet("top-logprobs") && !c.Bool("logprobs"):
		return errors.New("--top-logprobs needs --logprobs")
	case c.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q (the prompt goes in --prompt)", c.Args().Slice())
	}
	return nil
}

// RunContext returns the KV cache positions of a run of a prompt of prompt
// tokens generating up to maxTokens: flag when given (> 0), else what the
// run needs, prompt + maxTokens; at most the model's MaxContext. A flag above
// that is an error naming the limit, not a silent cap, and so is a prompt
// that does not fit with room to generate.
func RunContext(cfg runtime.Config, flag, prompt, maxTokens int) (int, error) {
	most := cfg.MaxContext()
	if flag > most {
		return 0, fmt.Errorf("--context %d: above the model's context (%s)", flag, maxContextName(cfg))
	}
	if flag > 0 {
		return flag, nil
	}
	need := prompt + max(maxTokens, 1)
	if prompt >= most {
		return 0, fmt.Errorf("the prompt is %d tokens and leaves no room in the model's context (%s): shorten it", prompt, maxContextName(cfg))
	}
	return min(need, most), nil
}

// maxContextName names the longest context of cfg with its source.
func maxContextName(cfg runtime.Config) string {
	if cfg.MaxContext() < cfg.MaxPositions {
		return fmt.Sprintf("sliding_window %d, from config.json's use_sliding_window: sinf computes full attention, which equals sliding-window attention only within the window", cfg.MaxContext())
	}
	return fmt.Sprintf("max_position_embeddings %d", cfg.MaxPositions)
}

func promptText(c *cli.Context) (string, error) {
	p := c.String("prompt")
	if p == "-" {
		b, err := io.ReadAll(io.LimitReader(c.App.Reader, 64<<20))
		if err != nil {
			return "", fmt.Errorf("--prompt -: reading standard input: %w", err)
		}
		if p = string(b); p == "" {
			return "", errors.New("empty prompt: standard input held nothing (--prompt -)")
		}
	}
	if f := c.String("prompt-file"); f != "" {
		if p != "" {
			return "", errors.New("give --prompt or --prompt-file, not both")
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		p = string(b)
	}
	if p == "" {
		return "", errors.New("empty prompt: give --prompt TEXT or --prompt-file FILE")
	}
	return p, nil
}

// Summary prints the one-line summary of a run: file size, neurons computed,
// speeds.
func Summary(w io.Writer, l *Loaded, r Report) {
	var loaded, computed, full int
	for i := range l.Model.Layers {
		if !l.Model.Layers[i].MLP.Sliced {
			continue
		}
		full += l.Model.Config.Intermediate
		loaded += r.LoadedNeurons[i]
		computed += r.ComputedNeurons[i]
	}
	line := fmt.Sprintf("[%s] %s: %s", r.Mode, l.Kind, runtime.HumanBytes(l.FileBytes))
	if l.Meta != nil && l.Meta.Provenance.Source != "" {
		if src, err := sourceBytes(l.Meta); err == nil && src > 0 {
			line += fmt.Sprintf(" (%.0f%% of the original %s)", 100*float64(l.FileBytes)/float64(src), runtime.HumanBytes(src))
		}
	}
	if full > 0 {
		line += fmt.Sprintf(", FFN neurons in sliced layers: %.0f%% loaded, %.0f%% computed per token", 100*float64(loaded)/float64(full), 100*float64(computed)/float64(full))
	}
	line += fmt.Sprintf(", prefill %.1f tok/s, decode %.1f tok/s, %d tokens, peak RSS %s", r.PrefillTokensPerS, r.DecodeTokensPerS, len(r.IDs), runtime.HumanBytes(r.PeakRSSBytes))
	fmt.Fprintln(w, line)
}

func sourceBytes(m *format.Metadata) (int64, error) {
	if m.Provenance.SourceBytes > 0 {
		return m.Provenance.SourceBytes, nil
	}
	return 0, errors.New("unknown")
}

// CheckThreads checks --threads for every command with that flag: negative
// or above kernels.MaxThreads is an error; above the physical cores this
// process may use (kernels.DefaultThreads, the default) it warns on the
// command's error stream, since threads beyond the cores share them: they
// add no memory bandwidth, and a call waits for each.
func CheckThreads(c *cli.Context) error {
	n, def, most := c.Int("threads"), kernels.DefaultThreads(), kernels.MaxThreads()
	switch {
	case n < 0:
		return fmt.Errorf("--threads %d: want ≥ 0 (0: the %d physical cores this process may use)", n, def)
	case n > most:
		return fmt.Errorf("--threads %d: at most %d (4 per CPU this process may use; it has %d physical cores, the default)", n, most, def)
	case n > def:
		fmt.Fprintf(c.App.ErrWriter, "warning: --threads %d is more than the %d physical cores this process may use: the extra threads share cores and will not run faster\n", n, def)
	}
	return nil
}

// ThreadsUsage is the --threads flag's usage text: what 0 means.
const ThreadsUsage = "kernel threads (0: the physical cores this process may use, within its CPU affinity and cgroup quota)"

// Plural returns "1 token", "2 tokens".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
