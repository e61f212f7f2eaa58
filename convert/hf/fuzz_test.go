package hf

import (
	"encoding/binary"
	"testing"

	"github.com/selectinfer/sinf/runtime"
)

// FuzzSafetensors feeds arbitrary bytes to the safetensors reader
// (sthead.Check, then the library, then the checkpoint's views) and binds
// whatever opens to a model of a tiny config. Nothing may panic; every
// tensor that is listed opens with as many bytes as its shape and dtype
// say.
func FuzzSafetensors(f *testing.F) {
	tensor := `{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}`
	for _, h := range []string{
		`{"__metadata__":{"format":"pt"},"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`,
		`{"w":` + tensor + `}`,
		`{"w":` + tensor + `,"w":` + tensor + `}`,
		`{"w\xff":` + tensor + `}`,
		`{"__metadata__":null}`,
		`{"a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},"b":{"dtype":"F16","shape":[0],"data_offsets":[2,2]}}`,
	} {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		f.Add(append(append(b, h...), make([]byte, 32)...))
	}
	f.Add([]byte("PK\x03\x04\x14\x00\x00\x00\x08\x00"))
	cfg := runtime.Config{ModelType: "llama", Hidden: 4, Intermediate: 8, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 2,
		Vocab: 2, MaxPositions: 8, RMSNormEps: 1e-5, RopeTheta: 10000, TieEmbeddings: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &Checkpoint{Dir: "fuzz", Config: cfg, tensors: map[string]tensorRef{}}
		if err := c.addFile(&stFile{path: "fuzz.safetensors", data: data}); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for n := range c.tensors {
			c.names = append(c.names, n)
		}
		for _, n := range c.names {
			v, err := c.Tensor(n)
			if err != nil {
				t.Fatalf("listed tensor %q does not open: %v", n, err)
			}
			if len(v.Data) != v.Elems()*v.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for %v of %v", n, len(v.Data), v.Shape, v.DType)
			}
			if v.Elems() < 1<<16 {
				_, _ = v.ToF32()
			}
		}
		if _, err := c.Validate(); err == nil {
			if _, err := runtime.Load(cfg, c, runtime.LoadOptions{}); err != nil {
				t.Fatalf("validated but does not load: %v", err)
			}
		}
	})
}
