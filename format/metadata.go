package format

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Metadata is the file's metadata block: one UTF-8 JSON object (spec §4).
// Readers ignore keys they do not know. The raw JSON fields hold the source
// checkpoint's files as JSON values (whitespace and key order need not
// survive; the values do), so that one .sinf file is all a device needs.
type Metadata struct {
	// Config is the HuggingFace config.json object. Required in a model file.
	Config json.RawMessage `json:"config,omitempty"`
	// GenerationConfig is generation_config.json, when the source has one.
	GenerationConfig json.RawMessage `json:"generation_config,omitempty"`
	// Tokenizer is tokenizer.json. Required in a model file.
	Tokenizer json.RawMessage `json:"tokenizer,omitempty"`
	// TokenizerConfig is tokenizer_config.json, when the source has one.
	TokenizerConfig json.RawMessage `json:"tokenizer_config,omitempty"`
	// DType is the element type of the FFN weights (gate, up, down), written
	// as its name ("BF16"). Zero (absent) when the file holds no FFN weights.
	DType DType `json:"dtype,omitempty"`
	// Selection describes the sliced FFN layers; nil when no layer is sliced.
	Selection *Selection `json:"selection,omitempty"`
	// Provenance records where the file came from.
	Provenance Provenance `json:"provenance"`
}

// Selection describes which FFN neurons the file keeps (spec §4.2).
type Selection struct {
	// Gamma is γ ∈ (0, 1], the fraction of each sliced layer's N neurons kept.
	Gamma float64 `json:"gamma"`
	// Delta is δ ∈ [0, γ], the fraction of the N neurons kept as base
	// (static) neurons, as the converter was given it. Readers use
	// Layers[].Base and never recompute it from Delta.
	Delta float64 `json:"delta"`
	// FirstLayer and LastLayer bound the sliced layers: absolute decoder
	// layer indices, FirstLayer inclusive, LastLayer exclusive, resolved
	// (never negative or relative).
	FirstLayer int `json:"first_layer"`
	LastLayer  int `json:"last_layer"`
	// Random is true when the neurons were chosen at random (a baseline)
	// rather than from scores; Seed is then the random seed.
	Random bool  `json:"random"`
	Seed   int64 `json:"seed"`
	// WeightAware is true when the scores were scaled by each neuron's
	// ‖W_down[:,n]‖₂ before ranking (spec §4.2).
	WeightAware bool `json:"weight_aware,omitempty"`
	// Reconstruction says how the kept neurons were made to stand in for
	// the dropped ones (spec §4.2); nil: plain slices.
	Reconstruction *Reconstruction `json:"reconstruction,omitempty"`
	// Predictor names what GateFirst ranks a sliced layer's rows by per
	// token beyond the gate (spec §4.2): "up_sketch" when every sliced layer
	// stores up_proj.sketch; empty: none (informative).
	Predictor string `json:"predictor,omitempty"`
	// Layers has one entry per sliced layer, in layer order:
	// Layers[k].Layer == FirstLayer+k.
	Layers []LayerSelection `json:"layers"`
}

// Reconstruction describes a reconstructed selection (spec §4.2):
// informative, since the runtime needs only the stored tensors.
type Reconstruction struct {
	// Bias: each sliced layer stores down_proj.bias, the mean output of
	// the dropped neurons the refit does not carry (FlagFFNBias).
	Bias bool `json:"bias"`
	// Refit: the rows of down_proj.weight_t are the ridge least-squares
	// refit of the kept columns, not HF's columns.
	Refit bool `json:"refit"`
	// Tasks and Tokens: the calibration text (built-in datasets, profile
	// split) and the tokens its statistics were taken over.
	Tasks  []string `json:"tasks,omitempty"`
	Tokens int64    `json:"tokens"`
	// Generated: the tokens the unsliced model sampled after each
	// calibration prompt, which the statistics include (0: none).
	Generated int `json:"generated,omitempty"`
	// Ridge[k] is the c of layer FirstLayer+k's ridge, λ = c·trace(C)/kept
	// (C the kept activations' covariance); empty without Refit.
	Ridge []float64 `json:"ridge,omitempty"`
}

// LayerSelection is one sliced layer's neuron counts.
type LayerSelection struct {
	Layer int `json:"layer"` // absolute decoder layer index
	Kept  int `json:"kept"`  // rows stored: len(neuron_index), 1 ≤ Kept ≤ N
	Base  int `json:"base"`  // the first Base rows are base (static) neurons, 0 ≤ Base ≤ Kept
}

// Provenance records the inputs of a conversion (spec §4.3).
type Provenance struct {
	// SourceDigest is "sha256:" + 64 lowercase hex digits: SHA-256 of the
	// source checkpoint's config.json followed by its weight files in byte
	// order of name (see SourceDigest).
	SourceDigest string `json:"source_digest,omitempty"`
	// Source is the source checkpoint's path or name as the user gave it.
	Source string `json:"source,omitempty"`
	// SourceBytes is the total size of the source checkpoint's weight
	// tensors in bytes, so a reader can report the file size against it.
	SourceBytes int64 `json:"source_bytes,omitempty"`
	// TaskScores and ModelScores name the neuron score files the selection
	// used, when it used any.
	TaskScores  *ScoresRef `json:"task_scores,omitempty"`
	ModelScores *ScoresRef `json:"model_scores,omitempty"`
	// ToolVersion is the version string of the writing tool.
	ToolVersion string `json:"tool_version,omitempty"`
	// Created is the creation time, RFC 3339 (UTC recommended).
	Created string `json:"created,omitempty"`
}

// ScoresRef identifies one neuron score file.
type ScoresRef struct {
	Path            string   `json:"path"`                       // as the user gave it
	Digest          string   `json:"digest"`                     // "sha256:" + hex of the score file's bytes
	Task            string   `json:"task,omitempty"`             // the task scored, for task scores
	Tasks           []string `json:"tasks,omitempty"`            // the tasks pooled, for model scores
	InputTokens     int64    `json:"input_tokens,omitempty"`     // prompt tokens seen while scoring
	GeneratedTokens int64    `json:"generated_tokens,omitempty"` // generated tokens seen while scoring
}

// MarshalMetadata encodes m as the metadata block: compact JSON without HTML
// escaping (tokenizers hold "<s>" and similar). It validates m first.
func MarshalMetadata(m Metadata) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Validate checks the metadata's internal consistency (spec §4): embedded
// files are JSON objects, the dtype is known, the selection's layer list
// matches its range with 0 ≤ base ≤ kept, digests are "sha256:<hex>" and
// created is RFC 3339. It returns an error naming the first bad key.
// Checks against the tensors are ValidateSelection's.
func (m *Metadata) Validate() error {
	for _, f := range []struct {
		key string
		raw json.RawMessage
	}{{"config", m.Config}, {"generation_config", m.GenerationConfig}, {"tokenizer", m.Tokenizer}, {"tokenizer_config", m.TokenizerConfig}} {
		if len(f.raw) == 0 {
			continue
		}
		if t := bytes.TrimLeft(f.raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
			return fmt.Errorf("metadata key %s: want a JSON object, found %.40s", f.key, f.raw)
		}
	}
	if m.DType != 0 && !m.DType.Known() {
		return fmt.Errorf("metadata key dtype: unknown dtype %v", m.DType)
	}
	if m.DType.Interleaved() {
		return fmt.Errorf("metadata key dtype: %v is a tensor layout (spec §5.4); the weights' dtype is %v", m.DType, m.DType.Base())
	}
	if s := m.Selection; s != nil {
		if !(s.Gamma > 0 && s.Gamma <= 1) {
			return fmt.Errorf("metadata key selection.gamma: %v is not in (0, 1]", s.Gamma)
		}
		if !(s.Delta >= 0 && s.Delta <= s.Gamma) {
			return fmt.Errorf("metadata key selection.delta: %v is not in [0, gamma %v]", s.Delta, s.Gamma)
		}
		if s.FirstLayer < 0 || s.LastLayer < s.FirstLayer {
			return fmt.Errorf("metadata key selection: layer range [%d, %d) is invalid", s.FirstLayer, s.LastLayer)
		}
		if len(s.Layers) != s.LastLayer-s.FirstLayer {
			return fmt.Errorf("metadata key selection.layers: %d entries for the %d layers [%d, %d)",
				len(s.Layers), s.LastLayer-s.FirstLayer, s.FirstLayer, s.LastLayer)
		}
		if r := s.Reconstruction; r != nil {
			if r.Tokens < 0 {
				return fmt.Errorf("metadata key selection.reconstruction.tokens: %d is negative", r.Tokens)
			}
			if len(r.Ridge) != 0 && len(r.Ridge) != len(s.Layers) {
				return fmt.Errorf("metadata key selection.reconstruction.ridge: %d entries for %d sliced layers", len(r.Ridge), len(s.Layers))
			}
		}
		for k, l := range s.Layers {
			if l.Layer != s.FirstLayer+k {
				return fmt.Errorf("metadata key selection.layers[%d].layer: %d, want %d", k, l.Layer, s.FirstLayer+k)
			}
			if l.Kept < 1 || l.Base < 0 || l.Base > l.Kept {
				return fmt.Errorf("metadata key selection.layers[%d] (layer %d): want kept ≥ 1 and 0 ≤ base ≤ kept, found base %d, kept %d",
					k, l.Layer, l.Base, l.Kept)
			}
		}
	}
	p := &m.Provenance
	if err := checkDigest("provenance.source_digest", p.SourceDigest); err != nil {
		return err
	}
	for _, r := range []struct {
		key string
		ref *ScoresRef
	}{{"provenance.task_scores", p.TaskScores}, {"provenance.model_scores", p.ModelScores}} {
		if r.ref == nil {
			continue
		}
		if err := checkDigest(r.key+".digest", r.ref.Digest); err != nil {
			return err
		}
		if r.ref.InputTokens < 0 || r.ref.GeneratedTokens < 0 {
			return fmt.Errorf("metadata key %s: negative token count", r.key)
		}
	}
	if p.Created != "" {
		if _, err := time.Parse(time.RFC3339, p.Created); err != nil {
			return fmt.Errorf("metadata key provenance.created: %q is not RFC 3339", p.Created)
		}
	}
	return nil
}

// checkDigest accepts "" or "sha256:" followed by 64 lowercase hex digits.
func checkDigest(key, d string) error {
	if d == "" {
		return nil
	}
	h, ok := strings.CutPrefix(d, "sha256:")
	if ok && len(h) == 64 && strings.ToLower(h) == h {
		if _, err := hex.DecodeString(h); err == nil {
			return nil
		}
	}
	return fmt.Errorf("metadata key %s: %q is not sha256:<64 lowercase hex digits>", key, d)
}

// DigestFiles returns "sha256:<hex>", the SHA-256 of the named files' bytes
// concatenated in the order given (spec §4.3), reading them in a stream.
func DigestFiles(paths ...string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// SourceDigest returns provenance.source_digest for a HuggingFace checkpoint
// folder (spec §4.3): DigestFiles of dir/config.json followed by the weight
// files in byte order of name. The weight files are the distinct files that
// model.safetensors.index.json's weight_map names when that index exists,
// else model.safetensors. For a single-file checkpoint this equals
// `cat config.json model.safetensors | sha256sum`.
func SourceDigest(dir string) (string, error) {
	var files []string
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	raw, err := os.ReadFile(idxPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		files = []string{"model.safetensors"}
	case err != nil:
		return "", err
	default:
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return "", fmt.Errorf("%s: %w", idxPath, err)
		}
		seen := map[string]bool{}
		for _, f := range idx.WeightMap {
			if f != filepath.Base(f) || f == "." || f == ".." {
				return "", fmt.Errorf("%s: weight_map names %q outside the folder", idxPath, f)
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
		if len(files) == 0 {
			return "", fmt.Errorf("%s: weight_map is empty", idxPath)
		}
		sort.Strings(files)
	}
	paths := []string{filepath.Join(dir, "config.json")}
	for _, f := range files {
		paths = append(paths, filepath.Join(dir, f))
	}
	return DigestFiles(paths...)
}
