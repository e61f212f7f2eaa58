package format

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// ggmlGolden is testdata/golden/ggml-quants-random.json: the SHA-256 of the
// blocks GGML's reference quantizers wrote for seeded random tensors (its
// made_by and generator fields say how).
type ggmlGolden struct {
	Tensors map[string]struct {
		Shape  [2]int
		DTypes map[string]struct {
			Bytes  int
			SHA256 string
		}
	}
}

// goldenTensor regenerates one of the golden file's inputs (its generator
// field): splitmix64, four uniforms per value, an outlier in 64, a per-row
// scale, and four special rows.
func goldenTensor(rows, cols int) []float32 {
	st := uint64(1000 + cols)
	next := func() uint64 {
		st += 0x9E3779B97F4A7C15
		z := st
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		return z ^ z>>31
	}
	u := func() float64 { return float64(next()>>11) * 0x1p-53 }
	x := make([]float32, rows*cols)
	for r := range rows {
		f := float64(int(1)<<(r%5)) / 4
		for c := range cols {
			g := u() + u() + u() + u() - 2
			if next()%64 == 0 {
				g *= 8
			}
			v := float32(float64(g*0.02) * f)
			switch r {
			case 0:
				v = 0
			case 1:
				v = 0.01
			case 2:
				v = float32(g * 1e-7)
			case 3:
				v = -float32(u() * 0.05)
			}
			x[r*cols+c] = v
		}
	}
	return x
}

// TestQuantizeMatchesGGML: Quantize gives, byte for byte, GGML's reference
// blocks (what llama-quantize writes without an importance matrix) for every
// block dtype, at the widths of real models (2048, 3072, 8192), including an
// all-zero row, a constant one, one whose F16 scales are subnormal and one of
// a single sign.
func TestQuantizeMatchesGGML(t *testing.T) {
	b, err := os.ReadFile("../testdata/golden/ggml-quants-random.json")
	require.NoError(t, err)
	var g ggmlGolden
	require.NoError(t, json.Unmarshal(b, &g))
	require.Len(t, g.Tensors, 3)
	for name, gt := range g.Tensors {
		x := goldenTensor(gt.Shape[0], gt.Shape[1])
		raw := make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		sum := sha256.Sum256(raw)
		require.Equal(t, gt.DTypes["F32"].SHA256, hex.EncodeToString(sum[:]), "%s: the generator's input", name)
		for _, d := range []DType{Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K} {
			want, ok := gt.DTypes[d.String()]
			require.True(t, ok, "%s %v", name, d)
			q, err := Quantize(nil, x, d)
			require.NoError(t, err)
			sum := sha256.Sum256(q)
			require.Equal(t, want.Bytes, len(q), "%s %v", name, d)
			require.Equal(t, want.SHA256, hex.EncodeToString(sum[:]), "%s %v", name, d)
		}
	}
}
