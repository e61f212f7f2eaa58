package dataset

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFiles creates files (relative path → content) under a new temporary
// data folder and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

func TestNamesAndLookup(t *testing.T) {
	names := Names()
	assert.True(t, sort.StringsAreSorted(names))
	for _, want := range []string{"squad_v2", "mlqa", "piqa", "wmt16-de-en", "wmt16-ro-en", "wmt14-fr-en",
		"wmt16-en-de", "wmt16-en-ro", "wmt14-en-fr", "xsum", "cnndm", "tinystories", "wikitext2"} {
		task, err := Lookup(want)
		require.NoError(t, err, want)
		assert.Equal(t, want, task.Name)
		assert.NotEmpty(t, task.Template)
		assert.NotEmpty(t, task.Description)
	}
	_, err := Lookup("squad")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"squad"`)
	assert.Contains(t, err.Error(), strings.Join(names, ", "))

	_, _, err = Load("nosuchtask", t.TempDir(), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "squad_v2")

	kinds := map[string]string{"squad_v2": KindQA, "mlqa": KindQA, "piqa": KindMultipleChoice,
		"wmt16-de-en": KindTranslation, "xsum": KindSummarization, "cnndm": KindSummarization,
		"tinystories": KindPerplexity, "wikitext2": KindPerplexity}
	for n, k := range kinds {
		task, _ := Lookup(n)
		assert.Equal(t, k, task.Kind, n)
	}
}

func TestTemplates(t *testing.T) {
	task, _ := Lookup("wmt16-de-en")
	assert.Equal(t, "Translate German to English.\nGerman: {src}\nEnglish:", task.Template)
	task, _ = Lookup("wmt14-en-fr")
	assert.Equal(t, "Translate English to French.\nEnglish: {src}\nFrench:", task.Template)
	task, _ = Lookup("wmt16-en-ro")
	assert.Equal(t, "Translate English to Romanian.\nEnglish: {src}\nRomanian:", task.Template)
	// Values are not rescanned for placeholders.
	assert.Equal(t, "Q: {b} / x", fill("Q: {a} / {b}", "a", "{b}", "b", "x"))
}

const squadJSON = `{"version": "v2.0", "data": [{"title": "Super_Bowl_50", "paragraphs": [
 {"context": "Denver won.", "qas": [
  {"question": "Who won?", "id": "q1", "answers": [{"text": "Denver", "answer_start": 0}, {"text": "Denver", "answer_start": 0}], "is_impossible": false},
  {"question": "Who lost?", "id": "q2", "answers": [], "plausible_answers": [{"text": "Denver", "answer_start": 0}], "is_impossible": true}]}]}]}`

func TestLoadSQuAD(t *testing.T) {
	dir := writeFiles(t, map[string]string{"squad_v2/dev-sample.json": squadJSON})
	task, ex, err := Load("squad_v2", dir, 0)
	require.NoError(t, err)
	assert.Equal(t, "squad_v2", task.Name)
	require.Len(t, ex, 2)
	assert.Equal(t, "q1", ex[0].ID)
	assert.Equal(t, "Title: Super Bowl 50\n\nBackground: Denver won.\n\nQuestion: Who won?\n\nAnswer:", ex[0].Prompt)
	assert.Equal(t, []string{"Denver", "Denver"}, ex[0].Refs)
	assert.Equal(t, "q2", ex[1].ID)
	assert.Empty(t, ex[1].Refs, "unanswerable question: no reference")

	_, ex, err = Load("squad_v2", dir, 1)
	require.NoError(t, err)
	assert.Len(t, ex, 1)
}

func TestLoadMLQA(t *testing.T) {
	dir := writeFiles(t, map[string]string{"mlqa/de-de-validation.jsonl": `{"context":"Berlin ist groß.","question":"Was ist groß?","answers":{"answer_start":[0],"text":["Berlin"]},"id":"m1"}` + "\n"})
	_, ex, err := Load("mlqa", dir, 0)
	require.NoError(t, err)
	require.Len(t, ex, 1)
	assert.Equal(t, Example{ID: "m1", Prompt: "Background: Berlin ist groß.\n\nQuestion: Was ist groß?\n\nAnswer:", Refs: []string{"Berlin"}}, ex[0])
}

func TestLoadPIQA(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"piqa/valid.jsonl":      `{"goal": "Open a jar", "sol1": "Twist the lid.", "sol2": "Eat the lid."}` + "\n" + `{"goal": "g2", "sol1": "a", "sol2": "b"}` + "\n",
		"piqa/valid-labels.lst": "0\n1\n",
	})
	task, ex, err := Load("piqa", dir, 0)
	require.NoError(t, err)
	assert.Equal(t, KindMultipleChoice, task.Kind)
	require.Len(t, ex, 2)
	assert.Equal(t, Example{ID: "0", Prompt: "Question: Open a jar\nAnswer:", Choices: []string{"Twist the lid.", "Eat the lid."},
		Label: 0, Refs: []string{"Twist the lid."}}, ex[0])
	assert.Equal(t, 1, ex[1].Label)
	assert.Equal(t, []string{"b"}, ex[1].Refs)

	// Label count mismatch, bad label.
	dir = writeFiles(t, map[string]string{"piqa/valid.jsonl": `{"goal": "g", "sol1": "a", "sol2": "b"}`, "piqa/valid-labels.lst": "0\n1\n"})
	_, _, err = Load("piqa", dir, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "valid-labels.lst")
	dir = writeFiles(t, map[string]string{"piqa/valid.jsonl": `{"goal": "g", "sol1": "a", "sol2": "b"}`, "piqa/valid-labels.lst": "2\n"})
	_, _, err = Load("piqa", dir, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "valid-labels.lst:1")
}

func TestLoadTranslation(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"wmt/de-en/newstest2016.deu": "Hallo Welt\r\nZweiter Satz\r\n",
		"wmt/de-en/newstest2016.eng": "Hello world\nSecond sentence\n",
	})
	_, ex, err := Load("wmt16-de-en", dir, 0)
	require.NoError(t, err)
	require.Len(t, ex, 2)
	assert.Equal(t, Example{ID: "0", Prompt: "Translate German to English.\nGerman: Hallo Welt\nEnglish:", Refs: []string{"Hello world"}}, ex[0])
	assert.Equal(t, "1", ex[1].ID)

	_, ex, err = Load("wmt16-en-de", dir, 0)
	require.NoError(t, err)
	assert.Equal(t, Example{ID: "1", Prompt: "Translate English to German.\nEnglish: Second sentence\nGerman:", Refs: []string{"Zweiter Satz"}}, ex[1])

	// Misaligned files.
	dir = writeFiles(t, map[string]string{"wmt/ro-en/newstest2016.ron": "a\nb\n", "wmt/ro-en/newstest2016.eng": "a\n"})
	_, _, err = Load("wmt16-ro-en", dir, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "newstest2016.eng")
}

func TestLoadSummarization(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"xsum/test-sample.jsonl": `{"id":"7","document":"Line one.\nLine two.","summary":"Two lines."}` + "\n",
		"cnndm/test-sample.jsonl": `{"id": "c1", "source": "cnn", "article": "Locke 's team won ( again ) .", "highlights_tokenized": ` +
			"\"Kite 's length is 6 km -LRB- 3.7 miles -RRB- . It cost £ 2,100 , `` a lot '' .\"}\n",
	})
	_, ex, err := Load("xsum", dir, 0)
	require.NoError(t, err)
	assert.Equal(t, Example{ID: "7", Prompt: "Document: Line one.\nLine two.\nSummarize the document in one sentence.\nSummary:", Refs: []string{"Two lines."}}, ex[0])

	_, ex, err = Load("cnndm", dir, 0)
	require.NoError(t, err)
	assert.Equal(t, Example{ID: "c1",
		Prompt: "Article: Locke's team won (again).\nSummarize the article in three sentences.\nSummary:",
		Refs:   []string{`Kite's length is 6 km (3.7 miles). It cost £2,100, "a lot".`}}, ex[0])
}

func TestDetokenizePTB(t *testing.T) {
	cases := []struct{ in, want string }{
		{"Kite 's total length is 6 km -LRB- 3.7 miles -RRB- and is made of 2,000 sections .",
			"Kite's total length is 6 km (3.7 miles) and is made of 2,000 sections."},
		{"within `` 20 to 30 years , '' she said .", `within "20 to 30 years," she said.`},
		{"Mila Kunis ' ` childhood friend ' is suing her for $ 5,000 .", "Mila Kunis' 'childhood friend' is suing her for $5,000."},
		{"we 're close ; it did n't , CA N'T", "we're close; it didn't, CAN'T"},
		{"-LSB- sic -RSB- -LCB- x -RCB- -lrb- y -rrb-", "[sic] {x} (y)"},
		{"How does ISIS govern ? 50 % ! Drexler : yes", "How does ISIS govern? 50%! Drexler: yes"},
		// Untokenised text is left alone: attached quotes and clitic-like
		// words, spaced dashes and ellipses, currency before a word.
		{"getting 're-elected' - or not ... $ signs 'so' it's", "getting 're-elected' - or not ... $ signs 'so' it's"},
		{"", ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, DetokenizePTB(c.in), "input %q", c.in)
	}
}

func TestLoadTinyStories(t *testing.T) {
	dir := writeFiles(t, map[string]string{"tinystories/validation-prefix.txt": "Once upon a time.\nThe end.\n\nSecond story. \n \n\n\nThird.\n"})
	_, ex, err := Load("tinystories", dir, 0)
	require.NoError(t, err)
	require.Len(t, ex, 3)
	assert.Equal(t, Example{ID: "0", Prompt: "Once upon a time.\nThe end.", Text: "Once upon a time.\nThe end."}, ex[0])
	assert.Equal(t, "Second story.", ex[1].Text)
	assert.Equal(t, "Third.", ex[2].Prompt)
	assert.Equal(t, "2", ex[2].ID)
}

func TestLoadWikiText(t *testing.T) {
	raw := " = Robert Boulter = \r\n Robert Boulter is an actor . \r\n = = Career = = \r\n He acted . \r\n = Du Fu = \r\n Du Fu was a poet . \r\n"
	dir := writeFiles(t, map[string]string{"wikitext2/wiki.test.raw": raw})
	_, ex, err := Load("wikitext2", dir, 0)
	require.NoError(t, err)
	require.Len(t, ex, 2)
	want0 := " = Robert Boulter = \n Robert Boulter is an actor . \n = = Career = = \n He acted . "
	assert.Equal(t, Example{ID: "0", Prompt: want0, Text: want0}, ex[0])
	assert.Equal(t, " = Du Fu = \n Du Fu was a poet . ", ex[1].Text)
	assert.True(t, isWikiTitle(" = Kiss You ( One Direction song ) = "))
	assert.False(t, isWikiTitle(" = = Filmography = = "))
	assert.False(t, isWikiTitle(" He said = yes = "))
}

func TestLoadErrors(t *testing.T) {
	// Missing data file: the error names the path and the task.
	dir := t.TempDir()
	_, _, err := Load("xsum", dir, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "xsum")
	assert.Contains(t, err.Error(), filepath.Join(dir, "xsum", "test-sample.jsonl"))

	// Empty JSONL: the error names the file.
	dir = writeFiles(t, map[string]string{"xsum/test-sample.jsonl": "\n \n"})
	_, _, err = Load("xsum", dir, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "xsum", "test-sample.jsonl"))

	// A bad line: the error names the file and the line number.
	dir = writeFiles(t, map[string]string{"mlqa/de-de-validation.jsonl": `{"id":"a","context":"c","question":"q","answers":{"text":["x"]}}` + "\n\n" + `{"id": oops}` + "\n"})
	_, _, err = Load("mlqa", dir, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "mlqa", "de-de-validation.jsonl")+":3")

	// Empty plain-text datasets.
	dir = writeFiles(t, map[string]string{"wikitext2/wiki.test.raw": "\r\n", "tinystories/validation-prefix.txt": ""})
	for _, n := range []string{"wikitext2", "tinystories"} {
		_, _, err = Load(n, dir, 0)
		require.Error(t, err, n)
		assert.Contains(t, err.Error(), dir, n)
	}
}

func TestLoadPromptFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mine.jsonl")
	content := `{"prompt": "Hello"}` + "\n" +
		`{"id": 42, "prompt": "Two", "reference": "2"}` + "\n" +
		"\n" +
		`{"id": "x", "prompt": "Refs", "reference": ["a", "b"]}` + "\n"
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	task, ex, err := Load(p, "/nonexistent", 0)
	require.NoError(t, err)
	assert.Equal(t, KindPrompts, task.Kind)
	assert.Equal(t, p, task.Name)
	assert.Equal(t, []Example{
		{ID: "0", Prompt: "Hello"},
		{ID: "42", Prompt: "Two", Refs: []string{"2"}},
		{ID: "x", Prompt: "Refs", Refs: []string{"a", "b"}},
	}, ex)
	_, ex, err = Load(p, "", 2)
	require.NoError(t, err)
	assert.Len(t, ex, 2)

	bad := map[string]string{
		`{"id": "a"}`:                         `missing string field "prompt"`,
		`{"prompt": ""}`:                      `bad.jsonl:1: field "prompt" is empty`,
		`{"prompt": "p", "reference": 3}`:     `"reference"`,
		`{"prompt": "p", "id": [1]}`:          `"id"`,
		`{"prompt": "p"}` + "\n" + `not json`: "bad.jsonl:2",
	}
	for content, want := range bad {
		b := filepath.Join(dir, "bad.jsonl")
		require.NoError(t, os.WriteFile(b, []byte(content), 0o644))
		_, _, err := Load(b, "", 0)
		require.Error(t, err, content)
		assert.Contains(t, err.Error(), want, content)
		assert.Contains(t, err.Error(), "bad.jsonl", content)
	}

	empty := filepath.Join(dir, "empty.jsonl")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, _, err = Load(empty, "", 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), empty)

	missing := filepath.Join(dir, "missing.jsonl")
	_, _, err = Load(missing, "", 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), missing)
}

func TestShard(t *testing.T) {
	ex := make([]Example, 7)
	for i := range ex {
		ex[i].ID = string(rune('a' + i))
	}
	ids := func(e []Example) string {
		s := ""
		for _, x := range e {
			s += x.ID
		}
		return s
	}
	got := ""
	for i := range 3 {
		sh, err := Shard(ex, i, 3)
		require.NoError(t, err)
		got += ids(sh) + "|"
	}
	assert.Equal(t, "adg|be|cf|", got)
	sh, err := Shard(ex, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, "abcdefg", ids(sh))
	sh, err = Shard(ex, 9, 10)
	require.NoError(t, err)
	assert.Empty(t, sh)
	for _, bad := range [][2]int{{0, 0}, {0, -1}, {3, 3}, {-1, 2}} {
		_, err := Shard(ex, bad[0], bad[1])
		assert.Error(t, err, "%v", bad)
	}

	i, n, err := ParseShard("2/8")
	require.NoError(t, err)
	assert.Equal(t, [2]int{2, 8}, [2]int{i, n})
	for _, bad := range []string{"", "3", "8/8", "-1/4", "1/0", "a/b", "1/2/3"} {
		_, _, err := ParseShard(bad)
		assert.Error(t, err, bad)
	}
}
