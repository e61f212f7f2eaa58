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
	// RepetitionPenalty is repetition_penalty (HF default 1.0: off), which HF
	// applies over the whole sequence, sampling or not.
	RepetitionPenalty *float64
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
		RepPenalty  *float64        `json:"repetition_penalty"`
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
	case h.RepPenalty != nil && !(*h.RepPenalty > 0 && !math.IsInf(*h.RepPenalty, 0)):
		return g, fmt.Errorf("%s: field repetition_penalty %g: want a finite number > 0", name, *h.RepPenalty)
	}
	g.DoSample, g.Temperature, g.TopK, g.TopP, g.RepetitionPenalty = h.DoSample, h.Temperature, h.TopK, h.TopP, h.RepPenalty
	return g, nil
}

// SamplingParams are a request's sampling settings, as NewSamplerParams
// takes them (the Sampler's doc gives each step's formula): Temperature 0 is
// greedy, TopK 0 no cut, TopP 1 no cut, MinP 0 no cut; RepeatPenalty 1 (or
// 0), PresencePenalty 0 and FrequencyPenalty 0 change nothing; PenaltyLastN
// is their window in tokens (0: off, −1: the whole sequence).
type SamplingParams struct {
	Temperature      float64
	TopK             int
	TopP             float64
	MinP             float64
	RepeatPenalty    float64 // HF repetition_penalty, llama.cpp repeat_penalty
	PresencePenalty  float64 // OpenAI presence_penalty
	FrequencyPenalty float64 // OpenAI frequency_penalty
	PenaltyLastN     int     // llama.cpp repeat_last_n (DefaultPenaltyLastN)
}

// Check returns an error naming the first setting outside its range, in the
// spelling name gives a field ("--top-p" or "top_p").
func (p SamplingParams) Check(name func(field string) string) error {
	switch {
	case !(p.Temperature >= 0) || math.IsInf(p.Temperature, 0):
		return fmt.Errorf("%s %g: want a finite number ≥ 0 (0: greedy)", name("temperature"), p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("%s %d: want ≥ 0 (0: no cut)", name("top_k"), p.TopK)
	case !(p.TopP > 0 && p.TopP <= 1):
		return fmt.Errorf("%s %g: want a probability in (0, 1]", name("top_p"), p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("%s %g: want a fraction in [0, 1] (0: no cut)", name("min_p"), p.MinP)
	case !(p.RepeatPenalty >= 0) || math.IsInf(p.RepeatPenalty, 0):
		return fmt.Errorf("%s %g: want a finite number ≥ 0 (0 or 1: off; above 1 penalizes repeats)", name("repeat_penalty"), p.RepeatPenalty)
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return fmt.Errorf("%s %g: want a number in [−2, 2] (0: off)", name("presence_penalty"), p.PresencePenalty)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return fmt.Errorf("%s %g: want a number in [−2, 2] (0: off)", name("frequency_penalty"), p.FrequencyPenalty)
	case p.PenaltyLastN < -1:
		return fmt.Errorf("%s %d: want ≥ −1 (0: penalties off, −1: the whole sequence)", name("repeat_last_n"), p.PenaltyLastN)
	}
	return nil
}

// Sampling returns the sampling defaults the file asks for, resolved as HF
// generate does: without do_sample true decoding is greedy whatever the
// other fields say; with it, temperature defaults to 1, top_k to 50 and
// top_p to 1. A do_sample with temperature 0 is greedy too. A
// repetition_penalty applies either way, over the whole sequence as HF's
// (PenaltyLastN −1; the default window is llama.cpp's 64).
func (g GenerationConfig) Sampling() SamplingParams {
	p := SamplingParams{Temperature: 1, TopK: 50, TopP: 1, RepeatPenalty: 1, PenaltyLastN: DefaultPenaltyLastN}
	if g.RepetitionPenalty != nil && *g.RepetitionPenalty != 1 {
		p.RepeatPenalty, p.PenaltyLastN = *g.RepetitionPenalty, -1
	}
	if g.DoSample == nil || !*g.DoSample {
		p.Temperature, p.TopK = 0, 0
		return p
	}
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
