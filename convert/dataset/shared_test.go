package dataset

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedData loads every built-in task from the shared data folder and
// checks the sizes the data README gives and a few known items.
func TestSharedData(t *testing.T) {
	dataDir := sharedtest.Path(t, "data")
	want := map[string]int{
		"squad_v2": 1124, "mlqa": 512, "piqa": 1838,
		"wmt16-de-en": 2999, "wmt16-en-de": 2999, "wmt16-ro-en": 1999, "wmt16-en-ro": 1999,
		"wmt14-de-en": 3003, "wmt14-en-de": 3003, "wmt14-fr-en": 3003, "wmt14-en-fr": 3003,
		"xsum": 1000, "cnndm": 250, "wikitext2": 62,
	}
	for _, name := range Names() {
		task, ex, err := Load(name, dataDir, 0)
		require.NoError(t, err, name)
		require.NotEmpty(t, ex, name)
		if n, ok := want[name]; ok {
			assert.Len(t, ex, n, name)
		}
		seen := map[string]bool{}
		for _, e := range ex {
			assert.NotEmpty(t, e.Prompt, "%s %s", name, e.ID)
			assert.False(t, seen[e.ID], "%s: duplicate id %s", name, e.ID)
			seen[e.ID] = true
			switch task.Kind {
			case KindTranslation, KindSummarization:
				assert.Len(t, e.Refs, 1, "%s %s", name, e.ID)
			case KindPerplexity:
				assert.Equal(t, e.Text, e.Prompt)
			case KindMultipleChoice:
				assert.Len(t, e.Choices, 2)
			}
		}
		// Deterministic, and limit takes a prefix.
		_, again, err := Load(name, dataDir, 5)
		require.NoError(t, err)
		assert.Equal(t, ex[:min(5, len(ex))], again, name)
	}
}

func TestSharedSQuAD(t *testing.T) {
	_, ex, err := Load("squad_v2", sharedtest.Path(t, "data"), 0)
	require.NoError(t, err)
	unanswerable := 0
	for _, e := range ex {
		if len(e.Refs) == 0 {
			unanswerable++
		}
	}
	assert.Equal(t, 541, unanswerable, "the README's count of unanswerable questions")
	assert.Equal(t, "56ddde6b9a695914005b9628", ex[0].ID)
	assert.True(t, strings.HasPrefix(ex[0].Prompt, "Title: Normans\n\nBackground: The Normans (Norman: Nourmands;"))
	assert.True(t, strings.HasSuffix(ex[0].Prompt, "\n\nQuestion: In what country is Normandy located?\n\nAnswer:"))
	assert.Equal(t, []string{"France", "France", "France", "France"}, ex[0].Refs)
}

func TestSharedOthers(t *testing.T) {
	dataDir := sharedtest.Path(t, "data")

	_, ex, err := Load("wmt16-ro-en", dataDir, 1)
	require.NoError(t, err)
	assert.Equal(t, "Translate Romanian to English.\nRomanian: Șeful ONU declară că nu există soluții militare în Siria\nEnglish:", ex[0].Prompt)
	assert.Equal(t, []string{"UN Chief Says There Is No Military Solution in Syria"}, ex[0].Refs)

	_, ex, err = Load("piqa", dataDir, 3)
	require.NoError(t, err)
	assert.Equal(t, "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:", ex[0].Prompt)
	assert.Equal(t, []int{0, 1, 1}, []int{ex[0].Label, ex[1].Label, ex[2].Label})

	_, ex, err = Load("cnndm", dataDir, 0)
	require.NoError(t, err)
	assert.Equal(t, "Gary Locke will be confirmed as Kilmarnock boss on Friday. The club went unbeaten during Locke's first six games in charge. The 39-year-old former Killie defender has paid tribute to his players.", ex[0].Refs[0])
	for _, e := range ex {
		// (" ... " is kept as it is.)
		for _, tok := range []string{"-LRB-", "-RRB-", "``", " 's ", " n't", " ,", " . "} {
			assert.NotContains(t, e.Refs[0], tok, e.ID)
		}
		assert.False(t, strings.HasSuffix(e.Refs[0], " ."), e.ID)
	}

	_, ex, err = Load("wikitext2", dataDir, 0)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(ex[0].Text, " = Robert Boulter = \n Robert Boulter is an English film"))
	assert.True(t, strings.HasPrefix(ex[1].Text, " = Du Fu = \n"))
	for _, e := range ex {
		assert.NotContains(t, e.Text, "\r")
	}

	_, ex, err = Load("tinystories", dataDir, 0)
	require.NoError(t, err)
	assert.Greater(t, len(ex), 1000)
	for _, e := range ex {
		assert.NotContains(t, e.Text, "\n\n")
		assert.Equal(t, strings.TrimSpace(e.Text), e.Text)
	}
}

func TestSharedFilesExist(t *testing.T) {
	dataDir := sharedtest.Path(t, "data")
	for _, name := range Names() {
		paths, err := Files(name, dataDir)
		require.NoError(t, err)
		for _, p := range paths {
			assert.FileExists(t, p)
			assert.True(t, strings.HasPrefix(p, dataDir+string(filepath.Separator)))
		}
	}
}

// TestSplits: the profile and eval splits of every built-in dataset are the
// two halves of its examples in file order, together the whole (the data
// itself repeats a few texts across the halves: 20 short TinyStories
// paragraphs, and 13 PIQA goals with other choices); Offset skips into a split, and an offset past its end
// is an error giving the split's size.
func TestSplits(t *testing.T) {
	dataDir := sharedtest.Path(t, "data")
	for _, name := range Names() {
		_, all, err := Load(name, dataDir, 0)
		require.NoError(t, err, name)
		_, prof, err := LoadSelection(name, dataDir, Selection{Split: SplitProfile})
		require.NoError(t, err, name)
		_, ev, err := LoadSelection(name, dataDir, Selection{Split: SplitEval})
		require.NoError(t, err, name)
		require.Equal(t, len(all)/2, len(prof), name)
		require.Equal(t, all, append(append([]Example(nil), prof...), ev...), name)
		_, off, err := LoadSelection(name, dataDir, Selection{Split: SplitEval, Offset: 3, Limit: 2})
		require.NoError(t, err, name)
		require.Equal(t, ev[3:5], off, name)
		_, _, err = LoadSelection(name, dataDir, Selection{Split: SplitEval, Offset: len(ev)})
		require.EqualError(t, err, fmt.Sprintf("dataset %s: offset %d outside the eval split's %d examples (of %d)", name, len(ev), len(ev), len(all)))
	}
}
