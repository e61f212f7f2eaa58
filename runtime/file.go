package runtime

import (
	"fmt"
	"runtime/debug"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime/kernels"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// LoadFile binds an open .sinf file (spec/sinf.md) to a Model: the
// architecture comes from the metadata's config (HF config.json), base counts
// from its selection, weights are views into the file's mapping. Errors name
// the file and the field or tensor.
func LoadFile(f *format.File) (m *Model, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if !kernels.IsFault(r) {
				panic(r)
			}
			m, err = nil, FaultError(f.Path(), r)
		}
	}()
	if err := f.ValidateSelection(); err != nil { // spec §7 item 12, before any sliced layer is used
		return nil, err
	}
	meta := f.Metadata()
	cfg, err := ParseConfig(f.Path()+": metadata field config", meta.Config)
	if err != nil {
		return nil, err
	}
	opt := LoadOptions{Base: map[int]int{}}
	if sel := meta.Selection; sel != nil {
		for _, l := range sel.Layers {
			opt.Base[l.Layer] = l.Base
		}
	}
	if m, err = Load(cfg, f, opt); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path(), err)
	}
	m.Path = f.Path()
	if meta.DType != 0 && m.Layers[0].MLP.Gate.DType.Base() != meta.DType { // interleaved rows: the base (spec §5.4)
		return nil, fmt.Errorf("%s: metadata field dtype %v disagrees with the FFN tensors' %v", f.Path(), meta.DType, m.Layers[0].MLP.Gate.DType)
	}
	if sel := meta.Selection; sel != nil {
		for _, l := range sel.Layers {
			if l.Layer < 0 || l.Layer >= len(m.Layers) || !m.Layers[l.Layer].MLP.Sliced || m.Layers[l.Layer].MLP.Kept() != l.Kept {
				return nil, fmt.Errorf("%s: metadata field selection.layers: layer %d kept %d disagrees with its neuron_index tensor", f.Path(), l.Layer, l.Kept)
			}
		}
	}
	return m, nil
}

// OpenOptions configure OpenFile.
type OpenOptions struct {
	Verify bool // check every tensor checksum before binding the model
	// Cache, when its Path is set, makes OpenFile check every checksum of a
	// file the cache does not know as verified (its first open, by file
	// identity), and remember a pass: sinf run and sinf-run's default.
	Cache VerifyCache
	// NoMmap reads the file into memory (format.ReadFile) instead of
	// mapping it, for filesystems where a mapping is unsafe (network or
	// FUSE mounts, files that may be replaced while running).
	NoMmap bool
}

// Open is OpenFile with only OpenOptions.Verify.
func Open(path string, verify bool) (*Model, *tokenizer.Tokenizer, *format.File, error) {
	return OpenFile(path, OpenOptions{Verify: verify})
}

// OpenFile maps (or, with NoMmap, reads) the .sinf file at path, optionally
// verifies every tensor checksum, and returns the model bound to it, the
// tokenizer embedded in its metadata, and the file, which the caller closes
// when done with the model.
func OpenFile(path string, o OpenOptions) (*Model, *tokenizer.Tokenizer, *format.File, error) {
	open := format.Open
	if o.NoMmap {
		open = format.ReadFile
	}
	f, err := open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	if o.Verify || o.Cache.Path != "" && !o.Cache.Verified(path, f.Stat()) {
		if err := f.Verify(); err != nil {
			f.Close()
			return nil, nil, nil, err
		}
		o.Cache.Remember(path, f.Stat())
	}
	m, err := LoadFile(f)
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	meta := f.Metadata()
	tok, err := tokenizer.New(path+": metadata field tokenizer", meta.Tokenizer, meta.TokenizerConfig)
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	return m, tok, f, nil
}
