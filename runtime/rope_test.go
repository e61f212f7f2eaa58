package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRopeLinear (issue 23 item 5): rope_scaling linear turns position p
// as p / factor would (HF _compute_linear_scaling_rope_parameters). The
// rotation the forward pass applies to a head vector at each position is
// checked against a float64 reference computed here from rope_theta, the
// factor and the position, within 2e-6 (float32 tables and products).
func TestRopeLinear(t *testing.T) {
	const factor, theta, hd, ctx = 4.0, 10000.0, 16, 64
	cfg, err := ParseConfig("c", []byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
		"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":64,"rope_theta":10000,
		"rope_scaling":{"rope_type":"linear","factor":4}}`))
	require.NoError(t, err)
	require.Equal(t, hd, cfg.HeadDim)
	m := &Model{Config: cfg, Layers: make([]Layer, 1), invFreq: cfg.RopeInvFreq()}
	s := m.NewSession(nil, ctx)
	rng := rand.New(rand.NewPCG(1, 2))
	half := hd / 2
	for p := 0; p < ctx; p++ {
		x := make([]float32, hd)
		for i := range x {
			x[i] = float32(rng.Float64()*2 - 1)
		}
		want := make([]float64, hd)
		for i := 0; i < half; i++ {
			angle := float64(p) / factor * math.Pow(theta, -float64(2*i)/hd)
			a, b := float64(x[i]), float64(x[i+half])
			want[i] = a*math.Cos(angle) - b*math.Sin(angle)
			want[i+half] = b*math.Cos(angle) + a*math.Sin(angle)
		}
		rope(x, s.buf.ropeCos[p*half:(p+1)*half], s.buf.ropeSin[p*half:(p+1)*half])
		for i := range x {
			require.InDelta(t, want[i], float64(x[i]), 2e-6, "position %d element %d", p, i)
		}
	}

	// Refused: a factor that is not positive, and an unknown type, naming it.
	for _, c := range []struct{ scaling, want string }{
		{`{"rope_type":"linear","factor":0}`, "c: field rope_scaling: linear needs a positive factor, found 0"},
		{`{"type":"dynamic","factor":2}`, `c: rope_scaling type "dynamic" is not supported (supported: linear, llama3)`},
	} {
		_, err := ParseConfig("c", []byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
			"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":64,"rope_scaling":`+c.scaling+`}`))
		require.EqualError(t, err, c.want)
	}
}
