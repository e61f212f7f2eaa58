package runtime

import (
	"fmt"

	"github.com/selectinfer/sinf/format"
)

// LoadFile binds an open .sinf file (spec/sinf.md) to a Model: the
// architecture comes from the metadata's config (HF config.json), base counts
// from its selection, weights are views into the file's mapping. Errors name
// the file and the field or tensor.
func LoadFile(f *format.File) (*Model, error) {
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
	m, err := Load(cfg, f, opt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path(), err)
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
