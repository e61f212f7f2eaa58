package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// GenerationConfig holds the fields of HF generation_config.json that sinf
// uses (transformers generation/configuration_utils.py, GenerationConfig).
// Nil pointers are fields the file does not set.
type GenerationConfig struct {
	EOS         []int    // eos_token_id: an int or a list
	DoSample    *bool    // do_sample (HF default false: greedy)
	Temperature *float64 // temperature (HF default 1.0)
	TopK        *int     // top_k (HF default 50)
	TopP        *float64 // top_p (HF default 1.0)
}

// ParseGenerationConfig parses generation_config.json. name labels errors
// (the file path, or "FILE.sinf: metadata field generation_config"); an
// empty data is no file and gives the zero GenerationConfig. It rejects a
// negative or non-finite temperature, a negative top_k and a top_p outside
// (0, 1], naming the field.
func ParseGenerationConfig(name string, data []byte) (GenerationConfig, error) {
	var g GenerationConfig
	if len(data) == 0 {
		return g, nil
	}
	var h struct {
		EOSTokenID  json.RawMessage `json:"eos_token_id"`
		DoSample    *bool           `json:"do_sample"`
		Temperature *float64        `json:"temperature"`
		TopK        *int            `json:"top_k"`
		TopP        *float64        `json:"top_p"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return g, fmt.Errorf("%s: %w", name, err)
	}
	var err error
	if g.EOS, err = parseTokenList(h.EOSTokenID); err != nil {
		return g, fmt.Errorf("%s: field eos_token_id: %w", name, err)
	}
	switch {
	case h.Temperature != nil && !(*h.Temperature >= 0 && !math.IsInf(*h.Temperature, 0)):
		return g, fmt.Errorf("%s: field temperature %g: want a finite number ≥ 0", name, *h.Temperature)
	case h.TopK != nil && *h.TopK < 0:
		return g, fmt.Errorf("%s: field top_k %d: want ≥ 0", name, *h.TopK)
	case h.TopP != nil && !(*h.TopP > 0 && *h.TopP <= 1):
		return g, fmt.Errorf("%s: field top_p %g: want a probability in (0, 1]", name, *h.TopP)
	}
	g.DoSample, g.Temperature, g.TopK, g.TopP = h.DoSample, h.Temperature, h.TopK, h.TopP
	return g, nil
}

// SamplingParams are a request's sampling settings, as NewSampler takes them:
// Temperature 0 is greedy, TopK 0 no cut, TopP 1 no cut.
type SamplingParams struct {
	Temperature float64
	TopK        int
	TopP        float64
}

// Sampling returns the sampling defaults the file asks for, resolved as HF
// generate does: without do_sample true decoding is greedy whatever the
// other fields say; with it, temperature defaults to 1, top_k to 50 and
// top_p to 1. A do_sample with temperature 0 is greedy too.
func (g GenerationConfig) Sampling() SamplingParams {
	if g.DoSample == nil || !*g.DoSample {
		return SamplingParams{Temperature: 0, TopK: 0, TopP: 1}
	}
	p := SamplingParams{Temperature: 1, TopK: 50, TopP: 1}
	if g.Temperature != nil {
		p.Temperature = *g.Temperature
	}
	if g.TopK != nil {
		p.TopK = *g.TopK
	}
	if g.TopP != nil {
		p.TopP = *g.TopP
	}
	return p
}

// EOSUnion returns the ids of all lists, each once, in order of first
// appearance: HF stops on any of generation_config.json's eos_token_id,
// and sinf also on config.json's and tokenizer_config.json's eos_token
// (a Llama-3.1 file lists <|eot_id|> and <|eom_id|> only in the first two).
func EOSUnion(lists ...[]int) []int {
	var u []int
	for _, l := range lists {
		for _, id := range l {
			if !slices.Contains(u, id) {
				u = append(u, id)
			}
		}
	}
	return u
}
