package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime/kernels"
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
		kernels.Rope(x, 1, s.buf.ropeCos[p*half:(p+1)*half], s.buf.ropeSin[p*half:(p+1)*half])
		for i := range x {
			require.InDelta(t, want[i], float64(x[i]), 2e-6, "position %d element %d", p, i)
		}
	}

	// Refused: a factor that is not positive, and an unknown type, naming it.
	for _, c := range []struct{ scaling, want string }{
		{`{"rope_type":"linear","factor":0}`, "c: field rope_scaling: linear needs a positive factor, found 0"},
		{`{"type":"dynamic","factor":2}`, `c: field rope_scaling: rope_type "dynamic" is not supported (supported: default, linear, llama3)`},
	} {
		_, err := ParseConfig("c", []byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
			"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":64,"rope_scaling":`+c.scaling+`}`))
		require.EqualError(t, err, c.want)
	}
}

// TestRopeParameters: transformers v5 writes RoPE as one rope_parameters
// dict (rope_theta, rope_type, factor…) instead of top-level rope_theta and
// rope_scaling; HF's RotaryEmbeddingConfigMixin reads either. Before, the
// dict was ignored and such a model ran with theta 10000 unscaled.
func TestRopeParameters(t *testing.T) {
	const base = `{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
		"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":64`
	parse := func(extra string) (Config, error) { return ParseConfig("m/config.json", []byte(base+extra+`}`)) }

	cfg, err := parse(`,"rope_parameters":{"rope_type":"default","rope_theta":500000}`)
	require.NoError(t, err)
	require.Equal(t, 500000.0, cfg.RopeTheta)
	require.Nil(t, cfg.RopeScaling)
	require.InDelta(t, math.Pow(500000, -2.0/16), cfg.RopeInvFreq()[1], 1e-15)

	// linear, with the older key spelling type: every frequency over factor.
	cfg, err = parse(`,"rope_parameters":{"type":"linear","factor":4,"rope_theta":1000000}`)
	require.NoError(t, err)
	require.Equal(t, &RopeScaling{Type: "linear", Factor: 4}, cfg.RopeScaling)
	require.InDelta(t, math.Pow(1e6, -6.0/16)/4, cfg.RopeInvFreq()[3], 1e-15)

	// llama3 as Llama-3.2 on transformers v5 saves it.
	l3 := `"rope_type":"llama3","factor":32,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192`
	cfg, err = parse(`,"rope_parameters":{` + l3 + `,"rope_theta":500000}`)
	require.NoError(t, err)
	require.Equal(t, &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}, cfg.RopeScaling)
	require.Equal(t, 500000.0, cfg.RopeTheta)
	require.InDelta(t, math.Pow(500000, -14.0/16)/32, cfg.RopeInvFreq()[7], 1e-18)

	// Without rope_theta anywhere: HF's default_theta.
	cfg, err = parse(`,"rope_parameters":{"rope_type":"default"}`)
	require.NoError(t, err)
	require.Equal(t, DefaultRopeTheta, cfg.RopeTheta)

	// Both forms, agreeing: accepted.
	cfg, err = parse(`,"rope_theta":500000,"rope_scaling":{` + l3 + `},"rope_parameters":{` + l3 + `,"rope_theta":500000}`)
	require.NoError(t, err)
	require.Equal(t, 500000.0, cfg.RopeTheta)
	require.Equal(t, "llama3", cfg.RopeScaling.Type)
	cfg, err = parse(`,"rope_scaling":null,"rope_theta":10000,"rope_parameters":{"rope_type":"linear","factor":2}`)
	require.NoError(t, err)
	require.Equal(t, &RopeScaling{Type: "linear", Factor: 2}, cfg.RopeScaling)

	for _, c := range []struct{ extra, want string }{
		{`,"rope_parameters":{"rope_type":"yarn","factor":4,"rope_theta":10000}`,
			`m/config.json: field rope_parameters: rope_type "yarn" is not supported (supported: default, linear, llama3)`},
		{`,"rope_parameters":{"rope_type":"linear","rope_theta":10000}`,
			"m/config.json: field rope_parameters: linear needs a positive factor, found 0"},
		{`,"rope_parameters":{"rope_type":"llama3","factor":32}`,
			"m/config.json: field rope_parameters: llama3 needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings"},
		{`,"rope_parameters":{"rope_type":"default","rope_theta":-1}`,
			"m/config.json: field rope_parameters.rope_theta -1 must be a positive number"},
		{`,"rope_parameters":{"rope_type":"default","rope_theta":10000,"partial_rotary_factor":0.5}`,
			"m/config.json: field rope_parameters.partial_rotary_factor 0.5 is not supported (RoPE on the whole head only: 1)"},
		{`,"rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":10000}}`,
			`m/config.json: field rope_parameters: RoPE parameters per layer type (key "full_attention") are not supported`},
		{`,"rope_parameters":"linear"`, `m/config.json: field rope_parameters: want an object, found "linear"`},
		{`,"rope_theta":500000,"rope_parameters":{"rope_type":"default","rope_theta":10000}`,
			"m/config.json: fields rope_theta (500000) and rope_parameters.rope_theta (10000) disagree"},
		{`,"rope_scaling":{"rope_type":"linear","factor":2},"rope_parameters":{"rope_type":"linear","factor":4}`,
			"m/config.json: fields rope_scaling (rope_type linear, factor 2) and rope_parameters (rope_type linear, factor 4) disagree"},
		{`,"rope_scaling":{"rope_type":"linear","factor":2},"rope_parameters":{"rope_type":"default","rope_theta":10000}`,
			"m/config.json: fields rope_scaling (rope_type linear, factor 2) and rope_parameters (rope_type default) disagree"},
	} {
		_, err := parse(c.extra)
		require.EqualError(t, err, c.want, c.extra)
	}
}
