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
func Open(path string) (*Loaded, error) {
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
	ck, m, tok, err := hf.LoadModel(path)
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
	return r
}
