// Package scores reads, writes, merges and compares SelectInfer neuron score
// files (spec/scores.md).
//
// A score file is a safetensors file holding, for every layer of a model, one
// F64 tensor "scores.layers.N" of shape [intermediate_size]: the activation
// score s_n = Σ_t |a_n(t)| of every FFN neuron n, a being the input of
// down_proj (silu(gate)·up), summed over all tokens the profiler processed
// (input and generated). The safetensors __metadata__ map says which model,
// task, dataset and shard the scores come from and how many prompts and
// tokens went in.
//
// A raw profile (Normalized false) holds plain sums. Merge divides each raw
// input by its token count and adds the results; its output (Normalized true)
// holds Σ_i s_i/T_i and is used as is by later merges, which makes merging
// associative and independent of the order of its inputs. Shard files of one
// run are summed raw before that division, so that merging the shards of a
// run gives what one unsharded run would have given.
package scores

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Format identification written to and required in every score file.
const (
	FormatName    = "sinf-scores"
	FormatVersion = 1
)

// Metadata keys of a score file's safetensors __metadata__ map.
const (
	KeyFormat           = "format"
	KeyFormatVersion    = "format_version"
	KeyModelDigest      = "model_digest"
	KeyTask             = "task"
	KeyDataset          = "dataset"
	KeyPrompts          = "prompts"
	KeyInputTokens      = "input_tokens"
	KeyGeneratedTokens  = "generated_tokens"
	KeyShard            = "shard"
	KeyToolVersion      = "tool_version"
	KeyMergedFrom       = "merged_from"
	KeyNormalized       = "normalized"
	KeyLayers           = "layers"
	KeyIntermediateSize = "intermediate_size"
)

// TensorName returns the name of layer's score tensor: "scores.layers.N".
func TensorName(layer int) string {
	return "scores.layers." + strconv.Itoa(layer)
}

// Errors that Read wraps, for errors.Is.
var (
	ErrNotSafetensors = errors.New("not a safetensors file")
	ErrNotScoreFile   = errors.New("not a score file")
	ErrNewerVersion   = errors.New("format_version newer than this reader")
)

// File is the content of one score file.
type File struct {
	// ModelDigest identifies the model (see ModelDigest).
	ModelDigest string
	// Task and Dataset name what was profiled; Shard is "I/N" (shard I of N,
	// zero-based: 0 ≤ I < N) for one part of a sharded run, "" otherwise. ToolVersion is
	// the version of the program that wrote the file.
	Task, Dataset, Shard, ToolVersion string
	// Prompts, InputTokens and GeneratedTokens count what the scores cover;
	// for a merge result they are the sums over MergedFrom.
	Prompts                      int
	InputTokens, GeneratedTokens int64
	// Normalized is false for a raw profile (Scores are plain sums over the
	// tokens) and true for a merge result (Scores are Σ_i s_i/T_i over its
	// sources). A normalized file has a non-empty MergedFrom, a raw one an
	// empty MergedFrom.
	Normalized bool
	// MergedFrom lists the raw profiles a merge result was built from.
	MergedFrom []Source
	// Scores holds one score per neuron, per layer: [layers][intermediate_size].
	Scores [][]float64
}

// Source describes one raw profile that went into a merge result. Digest is
// the raw file's ContentDigest.
type Source struct {
	Task            string `json:"task"`
	Dataset         string `json:"dataset"`
	Shard           string `json:"shard"`
	Prompts         int    `json:"prompts"`
	InputTokens     int64  `json:"input_tokens"`
	GeneratedTokens int64  `json:"generated_tokens"`
	Digest          string `json:"digest"`
}

// Tokens returns the number of tokens the scores cover: input + generated.
func (f *File) Tokens() int64 { return f.InputTokens + f.GeneratedTokens }

// Tokens returns the source's token count: input + generated.
func (s Source) Tokens() int64 { return s.InputTokens + s.GeneratedTokens }

// Layers returns the number of layers.
func (f *File) Layers() int { return len(f.Scores) }

// IntermediateSize returns the number of neurons per layer (0 without layers).
func (f *File) IntermediateSize() int {
	if len(f.Scores) == 0 {
		return 0
	}
	return len(f.Scores[0])
}

// Tasks returns the distinct non-empty tasks the file covers, sorted: those
// of MergedFrom for a merge result, else the file's own Task.
func (f *File) Tasks() []string {
	var ts []string
	if len(f.MergedFrom) == 0 {
		if f.Task != "" {
			ts = append(ts, f.Task)
		}
		return ts
	}
	for _, s := range f.MergedFrom {
		if s.Task != "" {
			ts = append(ts, s.Task)
		}
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// Source returns the Source entry that describes f itself.
func (f *File) Source() Source {
	return Source{
		Task: f.Task, Dataset: f.Dataset, Shard: f.Shard,
		Prompts: f.Prompts, InputTokens: f.InputTokens, GeneratedTokens: f.GeneratedTokens,
		Digest: f.ContentDigest(),
	}
}

// ModelDigest returns the identity of a model as written to model_digest: the
// hex SHA-256 of config.json's bytes followed by the names and shapes of the
// FFN tensors, names in byte order. Every string is written as its length
// (uint64, little endian) and bytes, every shape as its rank and dimensions
// (uint64 and int64, little endian); the whole is prefixed by the string
// "sinf-model-digest-v1". See spec/scores.md.
func ModelDigest(configJSON []byte, ffnShapes map[string][]int) string {
	h := sha256.New()
	putString(h, "sinf-model-digest-v1")
	putBytes(h, configJSON)
	names := make([]string, 0, len(ffnShapes))
	for n := range ffnShapes {
		names = append(names, n)
	}
	slices.Sort(names)
	putUint(h, uint64(len(names)))
	for _, n := range names {
		putString(h, n)
		shape := ffnShapes[n]
		putUint(h, uint64(len(shape)))
		for _, d := range shape {
			putUint(h, uint64(int64(d)))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ContentDigest returns the hex SHA-256 of the file's identifying content:
// model digest, task, dataset, shard, counts, the normalized flag and every
// score's bits (spec/scores.md). Merge records it for each raw input in
// MergedFrom and refuses to count one profile twice. ToolVersion and
// MergedFrom do not enter it.
func (f *File) ContentDigest() string {
	h := sha256.New()
	putString(h, "sinf-scores-content-v1")
	putString(h, f.ModelDigest)
	putString(h, f.Task)
	putString(h, f.Dataset)
	putString(h, f.Shard)
	putUint(h, uint64(int64(f.Prompts)))
	putUint(h, uint64(f.InputTokens))
	putUint(h, uint64(f.GeneratedTokens))
	if f.Normalized {
		putUint(h, 1)
	} else {
		putUint(h, 0)
	}
	putUint(h, uint64(len(f.Scores)))
	var buf []byte
	for _, row := range f.Scores {
		putUint(h, uint64(len(row)))
		buf = buf[:0]
		for _, v := range row {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(v))
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func putUint(h hash.Hash, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	h.Write(b[:])
}

func putBytes(h hash.Hash, b []byte) {
	putUint(h, uint64(len(b)))
	h.Write(b)
}

func putString(h hash.Hash, s string) {
	putUint(h, uint64(len(s)))
	h.Write([]byte(s))
}

// FormatShard returns the shard string "I/N" of shard i of n, zero-based
// (0 ≤ i < n), as convert/dataset.Shard numbers them.
func FormatShard(i, n int) string { return strconv.Itoa(i) + "/" + strconv.Itoa(n) }

// ParseShard parses a shard string "I/N": shard I of N, zero-based, with
// 0 ≤ I < N (the convention of convert/dataset.ParseShard and the profiler's
// --shard flag). It fails for "" (an unsharded run).
func ParseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		i, err1 := strconv.Atoi(a)
		n, err2 := strconv.Atoi(b)
		if err1 == nil && err2 == nil && i >= 0 && i < n {
			return i, n, nil
		}
	}
	return 0, 0, fmt.Errorf("shard %q is not \"I/N\" with 0 ≤ I < N", s)
}

// validate checks the invariants every score file holds. Errors name the
// field (metadata key or tensor) at fault.
func (f *File) validate() error {
	if f.ModelDigest == "" {
		return fmt.Errorf("%s is empty", KeyModelDigest)
	}
	if len(f.Scores) == 0 {
		return fmt.Errorf("%s is 0: a score file has at least one layer", KeyLayers)
	}
	n := len(f.Scores[0])
	if n == 0 {
		return fmt.Errorf("%s is 0: a layer has at least one neuron", KeyIntermediateSize)
	}
	for l, row := range f.Scores {
		if len(row) != n {
			return fmt.Errorf("tensor %s has %d scores, layer 0 has %d: inconsistent layers", TensorName(l), len(row), n)
		}
		for i, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("tensor %s: score of neuron %d is %v", TensorName(l), i, v)
			}
		}
	}
	if f.Prompts < 0 {
		return fmt.Errorf("%s is negative (%d)", KeyPrompts, f.Prompts)
	}
	if f.InputTokens < 0 {
		return fmt.Errorf("%s is negative (%d)", KeyInputTokens, f.InputTokens)
	}
	if f.GeneratedTokens < 0 {
		return fmt.Errorf("%s is negative (%d)", KeyGeneratedTokens, f.GeneratedTokens)
	}
	if f.InputTokens > math.MaxInt64-f.GeneratedTokens {
		return fmt.Errorf("%s + %s overflows", KeyInputTokens, KeyGeneratedTokens)
	}
	if f.Shard != "" {
		if _, _, err := ParseShard(f.Shard); err != nil {
			return fmt.Errorf("%s: %w", KeyShard, err)
		}
	}
	if !f.Normalized {
		if len(f.MergedFrom) != 0 {
			return fmt.Errorf("%s is false (a raw profile) but %s lists %d sources", KeyNormalized, KeyMergedFrom, len(f.MergedFrom))
		}
		return nil
	}
	if len(f.MergedFrom) == 0 {
		return fmt.Errorf("%s is true (a merge result) but %s is empty", KeyNormalized, KeyMergedFrom)
	}
	if f.Shard != "" {
		return fmt.Errorf("%s is %q but a merge result is not a shard", KeyShard, f.Shard)
	}
	var prompts, in, gen int64
	seen := make(map[string]int, len(f.MergedFrom))
	for i, s := range f.MergedFrom {
		if s.Digest == "" {
			return fmt.Errorf("%s[%d]: digest is empty", KeyMergedFrom, i)
		}
		if j, dup := seen[s.Digest]; dup {
			return fmt.Errorf("%s[%d] and [%d] have the same digest %s", KeyMergedFrom, j, i, s.Digest)
		}
		seen[s.Digest] = i
		if s.Shard != "" {
			if _, _, err := ParseShard(s.Shard); err != nil {
				return fmt.Errorf("%s[%d]: %w", KeyMergedFrom, i, err)
			}
		}
		if s.Prompts < 0 || s.InputTokens < 0 || s.GeneratedTokens < 0 {
			return fmt.Errorf("%s[%d]: negative count", KeyMergedFrom, i)
		}
		prompts += int64(s.Prompts)
		in += s.InputTokens
		gen += s.GeneratedTokens
	}
	if prompts != int64(f.Prompts) {
		return fmt.Errorf("%s is %d but the sources in %s add up to %d", KeyPrompts, f.Prompts, KeyMergedFrom, prompts)
	}
	if in != f.InputTokens {
		return fmt.Errorf("%s is %d but the sources in %s add up to %d", KeyInputTokens, f.InputTokens, KeyMergedFrom, in)
	}
	if gen != f.GeneratedTokens {
		return fmt.Errorf("%s is %d but the sources in %s add up to %d", KeyGeneratedTokens, f.GeneratedTokens, KeyMergedFrom, gen)
	}
	return nil
}

// compareSources orders sources canonically: task, dataset, shard count,
// shard index, digest (unsharded sources before sharded ones).
func compareSources(a, b Source) int {
	if c := cmp.Compare(a.Task, b.Task); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Dataset, b.Dataset); c != 0 {
		return c
	}
	ai, an, _ := ParseShard(a.Shard)
	bi, bn, _ := ParseShard(b.Shard)
	if c := cmp.Compare(an, bn); c != 0 {
		return c
	}
	if c := cmp.Compare(ai, bi); c != 0 {
		return c
	}
	return cmp.Compare(a.Digest, b.Digest)
}
