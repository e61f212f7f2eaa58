package runtime

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// UnusedTensors sorts the tensors of a checkpoint that a model of cfg does
// not read (names not in used, from Check) into those it may ignore, each
// returned with the reason, those the architecture does not have at all
// (unknown, sorted: HF's from_pretrained warns about such unexpected keys
// and skips them; see UnknownWarning), and those whose absence from the
// computation would change the result, which are an error naming the
// tensor and the config field. src serves the tensors (to compare a tied
// lm_head with the embedding). The rules follow what HF's LlamaForCausalLM
// and Qwen2ForCausalLM build for the config:
//
//   - lm_head.weight beside model.embed_tokens.weight in a tied model is
//     ignored (HF ties the head to the embedding); the reason says whether it
//     differs from the embedding;
//   - a RoPE buffer (rotary_emb.inv_freq) is ignored: it is recomputed from
//     rope_theta;
//   - a q/k/v/o or MLP bias the config does not provide for (attention_bias,
//     mlp_bias, or Qwen2's o_proj, which has none) is an error: the
//     architecture has the layer, and leaving its bias out changes it;
//   - any other tensor is unknown.
func UnusedTensors(cfg Config, names []string, used map[string]bool, src Source) (ignored, unknown []string, err error) {
	for _, n := range names {
		if used[n] {
			continue
		}
		switch {
		case n == "lm_head.weight" && cfg.TieEmbeddings:
			why := "equal to model.embed_tokens.weight, stored once"
			if !sameData(src, n, "model.embed_tokens.weight") {
				why = "it differs from model.embed_tokens.weight, but " + cfg.TieNote() + ", so the output projection is the embedding (as HF ties them)"
			}
			ignored = append(ignored, n+": ignored: "+why)
		case strings.HasSuffix(n, ".rotary_emb.inv_freq"):
			ignored = append(ignored, n+": ignored: a RoPE buffer, recomputed from rope_theta")
		case strings.HasSuffix(n, "_proj.bias") && strings.HasPrefix(n, "model.layers."):
			return ignored, unknown, biasError(cfg, n)
		default:
			unknown = append(unknown, n)
		}
	}
	sort.Strings(unknown)
	return ignored, unknown, nil
}

// maxNamed is how many unknown tensors UnknownWarning and UnknownError name.
const maxNamed = 8

// namedList joins up to maxNamed names and counts the rest.
func namedList(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:maxNamed], ", ") + fmt.Sprintf(" and %d more", len(names)-maxNamed)
}

// UnknownWarning is the warning for the unknown tensors of UnusedTensors
// (non-empty), which are skipped as HF skips unexpected weights.
func UnknownWarning(cfg Config, unknown []string) string {
	return fmt.Sprintf("%s %s not part of a %s model (HF %s): skipped, as HF skips unexpected weights with a warning; is config.json's model_type right? (--strict refuses them)",
		plural(len(unknown), "tensor", "tensors"), namedList(unknown)+isAre(len(unknown)), cfg.ModelType, hfClass(cfg))
}

// UnknownError refuses the unknown tensors of UnusedTensors (non-empty)
// under --strict.
func UnknownError(cfg Config, unknown []string) error {
	return fmt.Errorf("%s %s not part of a %s model (HF %s), and --strict refuses tensors the model does not read: is config.json's model_type right?",
		plural(len(unknown), "tensor", "tensors"), namedList(unknown)+isAre(len(unknown)), cfg.ModelType, hfClass(cfg))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func isAre(n int) string { return plural(n, " is", " are") }

func biasError(cfg Config, n string) error {
	switch {
	case strings.Contains(n, ".mlp."):
		return fmt.Errorf("tensor %s is stored, but config.json field mlp_bias is not true, so HF builds no MLP bias and it would be ignored, which changes the result (sinf does not run MLP biases)", n)
	case cfg.ModelType == "qwen2":
		return fmt.Errorf("tensor %s is stored, but HF Qwen2Attention has no o_proj bias, so it would be ignored, which changes the result: is config.json's model_type right?", n)
	}
	return fmt.Errorf("tensor %s is stored, but config.json field attention_bias is not true, so HF builds no attention bias and it would be ignored, which changes the result: set \"attention_bias\": true or remove the tensor", n)
}

func hfClass(cfg Config) string {
	if cfg.ModelType == "qwen2" {
		return "Qwen2ForCausalLM"
	}
	return "LlamaForCausalLM"
}

// sameData reports whether two stored tensors hold the same shape and bytes.
func sameData(src Source, a, b string) bool {
	ta, err1 := src.Tensor(a)
	tb, err2 := src.Tensor(b)
	return err1 == nil && err2 == nil && ta.DType == tb.DType && fmt.Sprint(ta.Shape) == fmt.Sprint(tb.Shape) && bytes.Equal(ta.Data, tb.Data)
}
