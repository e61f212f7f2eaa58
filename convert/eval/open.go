package eval

import (
	"os"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// Loaded is an opened model and its tokenizer.
type Loaded struct {
	Model     *runtime.Model
	Tok       *tokenizer.Tokenizer
	FileBytes int64 // size of the .sinf file, or of the folder's *.safetensors
	Close     func() error
}

// Open opens a .sinf file (memory-mapped, tokenizer from its metadata) or an
// HF checkpoint folder (safetensors, tokenizer.json), as `sinf run` does.
func Open(path string) (*Loaded, error) { return OpenWith(path, hf.Options{}) }

// OpenWith is Open with the options of an HF checkpoint folder (opt.Strict
// refuses stored tensors the architecture does not have); a .sinf file
// ignores them.
func OpenWith(path string, opt hf.Options) (*Loaded, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		m, tok, f, err := runtime.Open(path, false)
		if err != nil {
			return nil, err
		}
		return &Loaded{Model: m, Tok: tok, FileBytes: f.Size(), Close: f.Close}, nil
	}
	ck, m, tok, err := hf.LoadModel(path, opt)
	if err != nil {
		return nil, err
	}
	return &Loaded{Model: m, Tok: tok, FileBytes: ck.WeightBytes(), Close: ck.Close}, nil
}

// Report is the JSON form of one evaluation (`sinf eval --json`).
type Report struct {
	Task         string             `json:"task"`
	Kind         string             `json:"kind"`
	N            int                `json:"n"`
	Metrics      map[string]float64 `json:"metrics"`
	Mode         string             `json:"mode"`
	Phi          float64            `json:"phi"`
	Alpha        float64            `json:"alpha"`
	Seconds      float64            `json:"seconds"`
	PeakRSSBytes int64              `json:"peak_rss_bytes"`
	FileBytes    int64              `json:"file_bytes"`
	KVCacheBytes int64              `json:"kv_cache_bytes"`
	Context      int                `json:"context"`
	Tokens       int                `json:"tokens"`
	Truncated    int                `json:"truncated"`
	Model        string             `json:"model"`
	Mass         *MassReport        `json:"mass,omitempty"`
	// Weight bytes a decoded token reads, by part (synth.DecodeBytes).
	AttentionBytes int64 `json:"attention_bytes_per_token"`
	FFNBytes       int64 `json:"ffn_bytes_per_token"`
	LMHeadBytes    int64 `json:"lm_head_bytes_per_token"`
}

// MassReport is Result.Mass as fractions of the loaded neurons' Σ|a| over
// the decoded tokens: per sliced layer and over all of them.
type MassReport struct {
	Tokens int         `json:"tokens"` // decoded tokens counted
	Total  MassShare   `json:"total"`
	Layers []MassShare `json:"layers"`
}

// MassShare is one row of the mass report: Computed the share the computed
// neurons hold, Best what the best as many neurons per token would hold,
// Random the expected share of as many random loaded neurons.
type MassShare struct {
	Layer    int     `json:"layer"` // -1 for the total
	Loaded   int     `json:"loaded"`
	Computed int     `json:"computed"` // neurons per token
	Mass     float64 `json:"mass"`
	Best     float64 `json:"best"`
	Random   float64 `json:"random"`
}

// NewMassReport returns m's report (nil for a nil m).
func NewMassReport(m *runtime.MassMeter) *MassReport {
	if m == nil {
		return nil
	}
	share := func(layer int, l runtime.LayerMass) MassShare {
		a, b, r := l.Fraction()
		return MassShare{Layer: layer, Loaded: l.Loaded, Computed: l.Computed, Mass: a, Best: b, Random: r}
	}
	sum := m.Sum()
	rep := &MassReport{Tokens: sum.Tokens, Total: share(-1, sum)}
	for i, l := range m.Layers {
		if l.Tokens > 0 {
			rep.Layers = append(rep.Layers, share(i, l))
		}
	}
	return rep
}

// NewReport builds the report of res, evaluated with sp on the model at
// path of fileBytes bytes.
func NewReport(res *Result, sp runtime.Sparsity, path string, fileBytes int64) Report {
	r := Report{Task: res.Task, Kind: res.Kind, N: res.N, Metrics: res.Metrics, Mode: sp.Mode.String(), Seconds: res.Seconds,
		PeakRSSBytes: res.PeakRSS, FileBytes: fileBytes, KVCacheBytes: res.KVBytes, Context: res.Context,
		Tokens: res.Tokens, Truncated: res.Truncated, Model: path}
	if sp.Mode != runtime.Dense {
		r.Phi, r.Alpha = sp.Phi, sp.Alpha
	}
	r.Mass = res.Mass
	r.AttentionBytes, r.FFNBytes, r.LMHeadBytes = res.DecodeBytes.Attention, res.DecodeBytes.FFN, res.DecodeBytes.LMHead
	return r
}
