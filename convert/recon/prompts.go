package recon

import (
	"fmt"

	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// Prompts returns the calibration prompts: the profile split of each
// built-in dataset in tasks (the text sinf profile reads, so nothing of the
// eval split), at most limit prompts per task (≤ 0: all), encoded by tok
// with its BOS. Errors name the dataset and the prompt.
func Prompts(tasks []string, dataDir string, limit int, tok *tokenizer.Tokenizer) ([][]int, error) {
	var out [][]int
	for _, task := range tasks {
		_, ex, err := dataset.LoadSelection(task, dataDir, dataset.Selection{Split: dataset.SplitProfile, Limit: max(limit, 0)})
		if err != nil {
			return nil, err
		}
		for i, e := range ex {
			ids, err := tok.EncodeChecked(e.Prompt, tok.AddsBOS())
			if err != nil {
				return nil, fmt.Errorf("dataset %s: prompt %q (%d): %w", task, e.ID, i, err)
			}
			if len(ids) > 0 {
				out = append(out, ids)
			}
		}
	}
	return out, nil
}
