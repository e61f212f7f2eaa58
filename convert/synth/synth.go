// Package synth writes synthetic HuggingFace checkpoints: the real
// architecture config of a known model (SmolLM2, Qwen2.5, Llama-3.2) with
// random weights, so speed and memory can be measured at real shapes without
// downloading the model. Weights are streamed: the safetensors header is
// computed from the shapes, then each tensor is generated and written in
// chunks, so a 3B model never sits in memory. Every file says it is random.
//
// Values come from a counter-based generator: element j of a tensor is a
// function of (seed, tensor name, j) alone, so the bytes depend only on the
// seed, the shape, the vocabulary and the dtype — not on the number of
// goroutines, the chunking or the shard layout.
package synth

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// MetadataKey is the safetensors __metadata__ (and config.json) key that
// marks a synthetic checkpoint.
const MetadataKey = "sinf_synthetic"

// DefaultMaxShardBytes is the weight-file size above which the checkpoint is
// sharded (model-0000i-of-0000n.safetensors + model.safetensors.index.json).
const DefaultMaxShardBytes = 2_000_000_000

// ChunkElems is the number of elements generated and written as one piece.
const ChunkElems = 1 << 20

// Options configures Write.
type Options struct {
	Shape         Shape
	TokenizerDir  string       // its tokenizer.json (and tokenizer_config.json) are copied
	DType         format.DType // F32, F16 or BF16; 0: BF16 (the real checkpoints' dtype)
	Seed          uint64
	Vocab         int   // vocab_size; 0: max(the real model's, the tokenizer's size)
	MaxShardBytes int64 // 0: DefaultMaxShardBytes
	Force         bool  // allow a non-empty output folder (its weight files are replaced)
	Workers       int   // generating goroutines; 0: GOMAXPROCS
	Progress      io.Writer
	Command       string // the command line, recorded in README.md when set
}

// Report describes a written checkpoint.
type Report struct {
	Dir            string
	Files          []string // weight files, in order
	Bytes          int64    // bytes of the weight files
	Params         int64
	Vocab          int // vocab_size written
	TokenizerVocab int // ids the tokenizer defines
	Note           string
}

// Note returns the text that marks the files of a synthetic checkpoint.
func Note(seed uint64, shape string) string {
	return fmt.Sprintf("random weights, seed %d, shape %s", seed, shape)
}

// Write writes a synthetic checkpoint folder at dir (created when absent):
// config.json, generation_config.json, the weights, tokenizer.json and
// tokenizer_config.json copied from opt.TokenizerDir, and README.md. Each file
// goes through a temporary file renamed on success; config.json is written
// last, so a folder with a config.json is complete.
func Write(dir string, opt Options) (*Report, error) {
	s := opt.Shape
	if s.Name == "" {
		return nil, errors.New("synth: no shape")
	}
	dt := opt.DType
	if dt == 0 {
		dt = format.BF16
	}
	torchDType, ok := map[format.DType]string{format.F32: "float32", format.F16: "float16", format.BF16: "bfloat16"}[dt]
	if !ok {
		return nil, fmt.Errorf("synth: dtype %v: want F32, F16 or BF16", dt)
	}
	if opt.TokenizerDir == "" {
		return nil, errors.New("synth: a tokenizer folder is needed (tokenizer.json, tokenizer_config.json)")
	}
	tok, err := tokenizer.Load(opt.TokenizerDir)
	if err != nil {
		return nil, err
	}
	rep := &Report{Dir: dir, TokenizerVocab: tok.VocabSize(), Note: Note(opt.Seed, s.Name)}
	rep.Vocab = opt.Vocab
	if rep.Vocab == 0 {
		rep.Vocab = max(s.Vocab, tok.VocabSize())
	}
	if rep.Vocab < 1 {
		return nil, fmt.Errorf("synth: vocab %d must be positive", rep.Vocab)
	}
	bos, eos := s.BOS, []int{s.EOS}
	if tok.BOS() >= 0 {
		bos = tok.BOS()
	}
	if e := tok.EOS(); len(e) > 0 {
		eos = e
	}
	if bos >= rep.Vocab {
		bos = -1
	}
	eos = keepBelow(eos, rep.Vocab)

	if err := prepareDir(dir, opt.Force); err != nil {
		return nil, err
	}
	tensors := s.Tensors(rep.Vocab)
	maxShard := opt.MaxShardBytes
	if maxShard <= 0 {
		maxShard = DefaultMaxShardBytes
	}
	shards := planShards(tensors, dt, maxShard)
	var total int64
	for _, t := range tensors {
		total += int64(t.Elems() * dt.Size())
		rep.Params += int64(t.Elems())
	}
	g := &generator{seed: opt.Seed, dtype: dt, workers: opt.Workers}
	if g.workers <= 0 {
		g.workers = runtime.GOMAXPROCS(0)
	}
	if opt.Progress != nil {
		g.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(opt.Progress),
			progressbar.OptionSetDescription("synth "+s.Name), progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	meta := map[string]string{MetadataKey: rep.Note, "format": "pt"}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := "model.safetensors"
		if len(shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		path := filepath.Join(dir, name)
		n, err := g.writeFile(path, sh, meta)
		if err != nil {
			return nil, err
		}
		rep.Files = append(rep.Files, path)
		rep.Bytes += n
		for _, t := range sh {
			weightMap[t.Name] = name
		}
	}
	if g.bar != nil {
		g.bar.Finish()
	}
	if len(shards) > 1 {
		idx := map[string]any{"metadata": map[string]any{"total_size": total, MetadataKey: rep.Note}, "weight_map": weightMap}
		if err := writeJSON(filepath.Join(dir, "model.safetensors.index.json"), idx); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name     string
		required bool
	}{{"tokenizer.json", true}, {"tokenizer_config.json", false}} {
		b, err := os.ReadFile(filepath.Join(opt.TokenizerDir, f.name))
		if errors.Is(err, os.ErrNotExist) && !f.required {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := writeAtomic(filepath.Join(dir, f.name), b); err != nil {
			return nil, err
		}
	}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), s.GenerationConfig(bos, eos)); err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, "README.md"), []byte(readme(opt, rep, dt, len(shards)))); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), s.Config(rep.Vocab, bos, eos, torchDType, rep.Note)); err != nil {
		return nil, err
	}
	return rep, nil
}

func keepBelow(ids []int, n int) []int {
	var out []int
	for _, id := range ids {
		if id >= 0 && id < n {
			out = append(out, id)
		}
	}
	return out
}

// prepareDir creates dir, or checks that it is empty; with force it removes
// the weight files a previous checkpoint may have left there (another shard
// layout would otherwise be read instead of the new one).
func prepareDir(dir string, force bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if !force {
		return fmt.Errorf("%s exists and is not empty (use --force to replace its checkpoint)", dir)
	}
	for _, e := range entries {
		n := e.Name()
		if n == "model.safetensors.index.json" || (strings.HasPrefix(n, "model") && strings.HasSuffix(n, ".safetensors")) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// planShards splits tensors, in order, into files of at most maxBytes of
// data each (a larger tensor gets a file of its own).
func planShards(tensors []Tensor, dt format.DType, maxBytes int64) [][]Tensor {
	var out [][]Tensor
	var cur []Tensor
	var size int64
	for _, t := range tensors {
		b := int64(t.Elems() * dt.Size())
		if len(cur) > 0 && size+b > maxBytes {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += b
	}
	return append(out, cur)
}

// header returns a safetensors header for tensors stored back to back in
// order: the JSON, padded with spaces to a multiple of 8 bytes so the data
// that follows the 8-byte length stays 8-byte aligned.
func header(tensors []Tensor, dt format.DType, meta map[string]string) ([]byte, error) {
	type entry struct {
		DType   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	h := map[string]any{"__metadata__": meta}
	var off int64
	for _, t := range tensors {
		n := int64(t.Elems() * dt.Size())
		h[t.Name] = entry{dt.String(), t.Shape, [2]int64{off, off + n}}
		off += n
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	return b, nil
}

// generator fills tensors with their values and writes them.
type generator struct {
	seed    uint64
	dtype   format.DType
	workers int
	bar     *progressbar.ProgressBar
}

// writeFile writes one safetensors file through a temporary file in its
// folder, renamed on success; it returns the file's size.
func (g *generator) writeFile(path string, tensors []Tensor, meta map[string]string) (int64, error) {
	hdr, err := header(tensors, g.dtype, meta)
	if err != nil {
		return 0, err
	}
	tmp, release, err := format.CreateTemp(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer release() // after the rename or the removal below
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	w.Write(n[:])
	w.Write(hdr)
	if err := g.writeData(w, tensors); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return 0, err
	}
	fi, err := tmp.Stat()
	if err != nil {
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, err
	}
	ok = true
	return fi.Size(), nil
}

// piece is one chunk of one tensor on its way to the file.
type piece struct {
	t     *Tensor
	chunk int
	n     int // elements
	buf   []byte
	done  chan struct{}
}

// writeData generates the tensors' chunks on g.workers goroutines and writes
// them in order; at most about 2·workers chunks are in memory.
func (g *generator) writeData(w io.Writer, tensors []Tensor) error {
	depth := 2 * g.workers
	work := make(chan *piece, depth)
	order := make(chan *piece, depth)
	stop := make(chan struct{})
	go func() {
		defer close(work)
		defer close(order)
		for i := range tensors {
			t := &tensors[i]
			n := t.Elems()
			for c := 0; c*ChunkElems < n; c++ {
				p := &piece{t: t, chunk: c, n: min(ChunkElems, n-c*ChunkElems), done: make(chan struct{})}
				select {
				case order <- p:
				case <-stop:
					return
				}
				work <- p
			}
		}
	}()
	for range g.workers {
		go func() {
			for p := range work {
				p.buf = make([]byte, p.n*g.dtype.Size())
				Fill(p.buf, *p.t, p.chunk*ChunkElems, g.seed, g.dtype)
				close(p.done)
			}
		}()
	}
	var err error
	for p := range order {
		<-p.done
		if err != nil {
			continue
		}
		if _, err = w.Write(p.buf); err != nil {
			close(stop)
			continue
		}
		if g.bar != nil {
			g.bar.Add(len(p.buf))
		}
	}
	return err
}

// Fill writes elements [start, start+len(buf)/size) of tensor t into buf,
// encoded in dt. Element j's value depends only on (seed, t.Name, j).
func Fill(buf []byte, t Tensor, start int, seed uint64, dt format.DType) {
	n := len(buf) / dt.Size()
	if t.Init == Ones {
		for i := 0; i < n; i++ {
			put(buf, i, 1, dt)
		}
		return
	}
	std := float32(MatrixStd)
	if t.Init == Bias {
		std = BiasStd
	}
	key := streamKey(seed, t.Name)
	i := 0
	if start%2 == 1 && n > 0 {
		put(buf, 0, std*Normal01(key, start), dt)
		i = 1
	}
	// Two values per generator word.
	for ; i+1 < n; i += 2 {
		r := mix64(key + uint64((start+i)/2+1)*golden)
		a, b := std*invNormal(uint32(r)), std*invNormal(uint32(r>>32))
		switch dt {
		case format.F32:
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(a))
			binary.LittleEndian.PutUint32(buf[4*i+4:], math.Float32bits(b))
		case format.F16:
			binary.LittleEndian.PutUint16(buf[2*i:], format.F32ToF16(a))
			binary.LittleEndian.PutUint16(buf[2*i+2:], format.F32ToF16(b))
		case format.BF16:
			binary.LittleEndian.PutUint16(buf[2*i:], format.F32ToBF16(a))
			binary.LittleEndian.PutUint16(buf[2*i+2:], format.F32ToBF16(b))
		}
	}
	if i < n {
		put(buf, i, std*Normal01(key, start+i), dt)
	}
}

// streamKey is the generator key of one tensor: the user's seed mixed with
// a hash of the tensor's name.
func streamKey(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return mix64(seed ^ mix64(h.Sum64()))
}

const golden = 0x9e3779b97f4a7c15

// mix64 is SplitMix64's output function: a bijective 64-bit mixer.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Normal01 returns the standard normal value of element j of the stream
// key: a counter-based SplitMix64 word for the pair j/2 gives two 32-bit
// uniforms, each turned into a normal value by the inverse normal CDF.
func Normal01(key uint64, j int) float32 {
	r := mix64(key + uint64(j/2+1)*golden)
	return invNormal(uint32(r >> (32 * uint(j&1))))
}

// invNormal maps a 32-bit uniform u to Φ⁻¹((u+½)/2³²): by linear
// interpolation in a table of 4096 bins (interpolation error < 0.02σ, in the
// second-outermost bins), exactly (math.Erfcinv) in the two outermost bins,
// so the tails reach ±6.3σ.
func invNormal(u uint32) float32 {
	i := u >> 20
	if i == 0 || i == normBins-1 {
		p := (float64(u) + 0.5) / (1 << 32)
		return float32(-math.Sqrt2 * math.Erfcinv(2*p))
	}
	f := (float32(u&(1<<20-1)) + 0.5) * (1.0 / (1 << 20))
	return normTable[i] + (normTable[i+1]-normTable[i])*f
}

const normBins = 4096

// normTable holds Φ⁻¹(i/normBins) for i in [1, normBins-1].
var normTable = func() (t [normBins]float32) {
	for i := 1; i < normBins; i++ {
		t[i] = float32(-math.Sqrt2 * math.Erfcinv(2*float64(i)/normBins))
	}
	return t
}()

func put(buf []byte, i int, v float32, dt format.DType) {
	switch dt {
	case format.F32:
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	case format.F16:
		binary.LittleEndian.PutUint16(buf[2*i:], format.F32ToF16(v))
	case format.BF16:
		binary.LittleEndian.PutUint16(buf[2*i:], format.F32ToBF16(v))
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'))
}

// writeAtomic writes data to path through a temporary file renamed on success.
func writeAtomic(path string, data []byte) error {
	tmp, release, err := format.CreateTemp(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer release()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func readme(opt Options, rep *Report, dt format.DType, shards int) string {
	s := opt.Shape
	var b strings.Builder
	fmt.Fprintf(&b, "# Synthetic checkpoint — RANDOM WEIGHTS, not a trained model\n\n")
	fmt.Fprintf(&b, "Written by `sinf synth` (%s). It has the architecture config and tensor shapes of %s\n", rep.Note, s.Model)
	fmt.Fprintf(&b, "(shape `%s`) and random weights: normal(0, %g) for every weight matrix, 1 for the RMSNorm weights,\n", s.Name, MatrixStd)
	fmt.Fprintf(&b, "normal(0, %g) for biases, drawn from a generator seeded with %d (the same seed, shape, vocabulary and dtype\n", BiasStd, opt.Seed)
	fmt.Fprintf(&b, "always give the same bytes). Its text output is meaningless: it exists to measure speed and memory at\n")
	fmt.Fprintf(&b, "real shapes. Every safetensors file carries `__metadata__` `{\"%s\": \"%s\"}`, and config.json the\n", MetadataKey, rep.Note)
	fmt.Fprintf(&b, "same field.\n\n")
	fmt.Fprintf(&b, "| field | value |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| model_type | %s |\n| hidden_size | %d |\n| intermediate_size | %d |\n| num_hidden_layers | %d |\n", s.ModelType, s.Hidden, s.Intermediate, s.Layers)
	fmt.Fprintf(&b, "| num_attention_heads / num_key_value_heads / head_dim | %d / %d / %d |\n", s.Heads, s.KVHeads, s.HeadDim)
	fmt.Fprintf(&b, "| vocab_size | %d (the real model's: %d; the tokenizer's ids: %d) |\n", rep.Vocab, s.Vocab, rep.TokenizerVocab)
	fmt.Fprintf(&b, "| tie_word_embeddings | %v |\n| dtype | %v |\n| parameters | %d |\n| weight files | %d (%d bytes) |\n", s.TieEmbeddings, dt, rep.Params, shards, rep.Bytes)
	fmt.Fprintf(&b, "| tokenizer | copied from %s |\n", opt.TokenizerDir)
	b.WriteString("\n")
	switch {
	case rep.Vocab > s.Vocab:
		fmt.Fprintf(&b, "The vocabulary is larger than the real model's (%d > %d) so that every id of the copied tokenizer is\n", rep.Vocab, s.Vocab)
		fmt.Fprintf(&b, "valid: the embedding (and LM head) have %d more rows than the real model's. Write it with `--vocab %d`\n", rep.Vocab-s.Vocab, s.Vocab)
		fmt.Fprintf(&b, "for the exact real shape.\n")
	case rep.Vocab < rep.TokenizerVocab:
		fmt.Fprintf(&b, "The vocabulary (%d) is smaller than the tokenizer's (%d ids): text whose tokens have ids of %d or more\n", rep.Vocab, rep.TokenizerVocab, rep.Vocab)
		fmt.Fprintf(&b, "cannot be run (the runtime rejects them); benchmarks that feed token ids directly (`sinf bench`) are fine.\n")
	}
	if opt.Command != "" {
		fmt.Fprintf(&b, "\nCommand:\n\n```sh\n%s\n```\n", opt.Command)
	}
	return b.String()
}
