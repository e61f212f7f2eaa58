package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Prompt templates of the built-in tasks. {name} is replaced by the item's
// field of that name; nothing else is added (no leading or trailing
// whitespace). The answer, translation or summary the model generates
// follows the final colon.
const (
	// SQuADTemplate is the prompt of squad_v2: the phrasing of the
	// EleutherAI lm-evaluation-harness "squadv2" task. {title} is the
	// article title with underscores replaced by spaces
	// ("Computational_complexity_theory" → "Computational complexity
	// theory").
	SQuADTemplate = "Title: {title}\n\nBackground: {context}\n\nQuestion: {question}\n\nAnswer:"
	// MLQATemplate is the prompt of mlqa: the SQuAD phrasing without a
	// title (MLQA items have none); the context and question are German,
	// the frame stays English.
	MLQATemplate = "Background: {context}\n\nQuestion: {question}\n\nAnswer:"
	// PIQATemplate is the prompt (context) of piqa, as in the
	// lm-evaluation-harness "piqa" task; the choices sol1 and sol2 are
	// scored as continuations (the harness puts one space between the
	// prompt and a choice).
	PIQATemplate = "Question: {goal}\nAnswer:"
	// TranslationTemplate is the prompt pattern of the wmt* tasks; {Src}
	// and {Tgt} are the language names (English, German, Romanian, French)
	// and are fixed per task, {src} is the source sentence.
	TranslationTemplate = "Translate {Src} to {Tgt}.\n{Src}: {src}\n{Tgt}:"
	// XSumTemplate is the prompt of xsum.
	XSumTemplate = "Document: {document}\nSummarize the document in one sentence.\nSummary:"
	// CNNDMTemplate is the prompt of cnndm; {article} is the article after
	// DetokenizePTB.
	CNNDMTemplate = "Article: {article}\nSummarize the article in three sentences.\nSummary:"
	// TextTemplate is the prompt of the perplexity tasks (tinystories,
	// wikitext2): the raw text itself.
	TextTemplate = "{text}"
)

func init() {
	register(builtin{
		task: Task{Name: "squad_v2", Kind: KindQA,
			Description: "SQuAD v2.0 dev sample (3 articles, 1,124 questions, 541 unanswerable); exact match / F1",
			Template:    SQuADTemplate},
		files: []string{"squad_v2/dev-sample.json"},
		load:  loadSQuAD,
	})
	register(builtin{
		task: Task{Name: "mlqa", Kind: KindQA,
			Description: "MLQA de.de validation (512 German questions); exact match / F1",
			Template:    MLQATemplate},
		files: []string{"mlqa/de-de-validation.jsonl"},
		load:  loadMLQA,
	})
	register(builtin{
		task: Task{Name: "piqa", Kind: KindMultipleChoice,
			Description: "PIQA validation (1,838 two-choice physical commonsense items); log-likelihood accuracy",
			Template:    PIQATemplate},
		files: []string{"piqa/valid.jsonl", "piqa/valid-labels.lst"},
		load:  loadPIQA,
	})
	for _, w := range wmtTasks {
		register(builtin{
			task: Task{Name: w.name, Kind: KindTranslation,
				Description: fmt.Sprintf("WMT %s %s→%s (%s); BLEU", w.testSet, w.srcName, w.tgtName, w.dir),
				Template:    fill(TranslationTemplate, "Src", w.srcName, "Tgt", w.tgtName)},
			files: []string{"wmt/" + w.dir + "/" + w.testSet + "." + w.srcExt, "wmt/" + w.dir + "/" + w.testSet + "." + w.tgtExt},
			load:  loadTranslation,
		})
	}
	register(builtin{
		task: Task{Name: "xsum", Kind: KindSummarization,
			Description: "XSum test sample (1,000 BBC articles, one-sentence summaries); ROUGE",
			Template:    XSumTemplate},
		files: []string{"xsum/test-sample.jsonl"},
		load:  loadXSum,
	})
	register(builtin{
		task: Task{Name: "cnndm", Kind: KindSummarization,
			Description: "CNN/DailyMail test sample (250 articles, highlight summaries, PTB tokens undone); ROUGE",
			Template:    CNNDMTemplate},
		files: []string{"cnndm/test-sample.jsonl"},
		load:  loadCNNDM,
	})
	register(builtin{
		task: Task{Name: "tinystories", Kind: KindPerplexity,
			Description: "TinyStories validation prefix, one example per blank-line-separated block; perplexity",
			Template:    TextTemplate},
		files: []string{"tinystories/validation-prefix.txt"},
		load:  loadTinyStories,
	})
	register(builtin{
		task: Task{Name: "wikitext2", Kind: KindPerplexity,
			Description: "WikiText-2 raw test split, one example per article (62); perplexity",
			Template:    TextTemplate},
		files: []string{"wikitext2/wiki.test.raw"},
		load:  loadWikiText,
	})
}

// squadFile is the SQuAD JSON layout.
type squadFile struct {
	Data []struct {
		Title      string `json:"title"`
		Paragraphs []struct {
			Context string `json:"context"`
			QAs     []struct {
				ID       string `json:"id"`
				Question string `json:"question"`
				Answers  []struct {
					Text string `json:"text"`
				} `json:"answers"`
				IsImpossible bool `json:"is_impossible"`
			} `json:"qas"`
		} `json:"paragraphs"`
	} `json:"data"`
}

// loadSQuAD reads a SQuAD v2.0 JSON file. Prompt = SQuADTemplate with the
// article title (underscores → spaces), paragraph context and question;
// ID = the question id; Refs = the answer texts in file order (duplicates
// kept), empty when the question is unanswerable (is_impossible).
func loadSQuAD(_ Task, paths []string) ([]Example, error) {
	b, err := os.ReadFile(paths[0])
	if err != nil {
		return nil, err
	}
	var f squadFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", paths[0], err)
	}
	var ex []Example
	for _, art := range f.Data {
		title := strings.ReplaceAll(art.Title, "_", " ")
		for _, par := range art.Paragraphs {
			for _, qa := range par.QAs {
				e := Example{
					ID:     qa.ID,
					Prompt: fill(SQuADTemplate, "title", title, "context", par.Context, "question", qa.Question),
				}
				if !qa.IsImpossible {
					for _, a := range qa.Answers {
						e.Refs = append(e.Refs, a.Text)
					}
				}
				ex = append(ex, e)
			}
		}
	}
	return ex, nil
}

// loadMLQA reads MLQA JSONL ({"id", "context", "question", "answers":
// {"text": [...]}}). Prompt = MLQATemplate; ID = id; Refs = answers.text.
func loadMLQA(_ Task, paths []string) ([]Example, error) {
	var ex []Example
	err := readJSONL(paths[0], func(line []byte, _ int) error {
		var r struct {
			ID       string `json:"id"`
			Context  string `json:"context"`
			Question string `json:"question"`
			Answers  struct {
				Text []string `json:"text"`
			} `json:"answers"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		ex = append(ex, Example{
			ID:     r.ID,
			Prompt: fill(MLQATemplate, "context", r.Context, "question", r.Question),
			Refs:   r.Answers.Text,
		})
		return nil
	})
	return ex, err
}

// loadPIQA reads PIQA's valid.jsonl ({"goal", "sol1", "sol2"}) and
// valid-labels.lst (one 0 or 1 per line, aligned with the items).
// Prompt = PIQATemplate with the goal; Choices = [sol1, sol2] verbatim;
// Label = the label; Refs = [the correct solution]; ID = the position.
func loadPIQA(_ Task, paths []string) ([]Example, error) {
	var ex []Example
	err := readJSONL(paths[0], func(line []byte, _ int) error {
		var r struct {
			Goal string `json:"goal"`
			Sol1 string `json:"sol1"`
			Sol2 string `json:"sol2"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		ex = append(ex, Example{
			ID:      strconv.Itoa(len(ex)),
			Prompt:  fill(PIQATemplate, "goal", r.Goal),
			Choices: []string{r.Sol1, r.Sol2},
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	labels, err := readLines(paths[1])
	if err != nil {
		return nil, err
	}
	if len(labels) != len(ex) {
		return nil, fmt.Errorf("%s has %d labels but %s has %d items", paths[1], len(labels), paths[0], len(ex))
	}
	for i, l := range labels {
		v, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || v < 0 || v >= len(ex[i].Choices) {
			return nil, fmt.Errorf("%s:%d: label %q is not 0 or 1", paths[1], i+1, l)
		}
		ex[i].Label = v
		ex[i].Refs = []string{ex[i].Choices[v]}
	}
	return ex, nil
}

// wmtTask is one translation direction of a line-aligned WMT test set.
type wmtTask struct {
	name, dir, testSet, srcExt, tgtExt, srcName, tgtName string
}

// wmtTasks are the translation tasks: the files are
// wmt/<dir>/<testSet>.<ext> with one sentence per line.
var wmtTasks = []wmtTask{
	{"wmt16-de-en", "de-en", "newstest2016", "deu", "eng", "German", "English"},
	{"wmt16-en-de", "de-en", "newstest2016", "eng", "deu", "English", "German"},
	{"wmt16-ro-en", "ro-en", "newstest2016", "ron", "eng", "Romanian", "English"},
	{"wmt16-en-ro", "ro-en", "newstest2016", "eng", "ron", "English", "Romanian"},
	{"wmt14-de-en", "de-en", "newstest2014", "deu", "eng", "German", "English"},
	{"wmt14-en-de", "de-en", "newstest2014", "eng", "deu", "English", "German"},
	{"wmt14-fr-en", "fr-en", "newstest2014", "fra", "eng", "French", "English"},
	{"wmt14-en-fr", "fr-en", "newstest2014", "eng", "fra", "English", "French"},
}

// loadTranslation reads a source and a target file, line-aligned.
// Prompt = the task's template (TranslationTemplate with the language
// names) with the source line; Refs = [the target line]; ID = the
// zero-based line number.
func loadTranslation(t Task, paths []string) ([]Example, error) {
	src, err := readLines(paths[0])
	if err != nil {
		return nil, err
	}
	tgt, err := readLines(paths[1])
	if err != nil {
		return nil, err
	}
	if len(src) != len(tgt) {
		return nil, fmt.Errorf("%s has %d lines but %s has %d", paths[0], len(src), paths[1], len(tgt))
	}
	ex := make([]Example, len(src))
	for i := range src {
		ex[i] = Example{
			ID:     strconv.Itoa(i),
			Prompt: fill(t.Template, "src", src[i]),
			Refs:   []string{tgt[i]},
		}
	}
	return ex, nil
}

// loadXSum reads XSum JSONL ({"id", "document", "summary"}).
// Prompt = XSumTemplate with the document (its line breaks kept);
// Refs = [summary]; ID = id.
func loadXSum(_ Task, paths []string) ([]Example, error) {
	var ex []Example
	err := readJSONL(paths[0], func(line []byte, _ int) error {
		var r struct {
			ID       string `json:"id"`
			Document string `json:"document"`
			Summary  string `json:"summary"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		ex = append(ex, Example{
			ID:     r.ID,
			Prompt: fill(XSumTemplate, "document", r.Document),
			Refs:   []string{r.Summary},
		})
		return nil
	})
	return ex, err
}

// loadCNNDM reads CNN/DailyMail JSONL ({"id", "article",
// "highlights_tokenized"}, or "highlights"). Both the article and the
// highlights go through DetokenizePTB. Prompt = CNNDMTemplate with the
// article; Refs = [the highlights]; ID = id.
func loadCNNDM(_ Task, paths []string) ([]Example, error) {
	var ex []Example
	err := readJSONL(paths[0], func(line []byte, _ int) error {
		var r struct {
			ID         string  `json:"id"`
			Article    string  `json:"article"`
			Tokenized  *string `json:"highlights_tokenized"`
			Highlights *string `json:"highlights"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		ref := r.Tokenized
		if ref == nil {
			ref = r.Highlights
		}
		if ref == nil {
			return errors.New(`missing field "highlights_tokenized" (or "highlights")`)
		}
		ex = append(ex, Example{
			ID:     r.ID,
			Prompt: fill(CNNDMTemplate, "article", DetokenizePTB(r.Article)),
			Refs:   []string{DetokenizePTB(*ref)},
		})
		return nil
	})
	return ex, err
}

// loadTinyStories splits the text file into blocks separated by blank
// (empty or whitespace-only) lines; each block, trimmed of surrounding
// whitespace, is one example with Text = Prompt = the block and ID = its
// zero-based position. Note that in validation-prefix.txt the blank lines
// separate paragraphs, and story boundaries are not marked, so an example
// is a paragraph of a story (the first one starts mid-story).
func loadTinyStories(_ Task, paths []string) ([]Example, error) {
	lines, err := readLines(paths[0])
	if err != nil {
		return nil, err
	}
	var ex []Example
	var block []string
	flush := func() {
		if len(block) > 0 {
			text := strings.TrimSpace(strings.Join(block, "\n"))
			ex = append(ex, Example{ID: strconv.Itoa(len(ex)), Prompt: text, Text: text})
			block = block[:0]
		}
	}
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		block = append(block, l)
	}
	flush()
	return ex, nil
}

// isWikiTitle reports whether line (without its line ending) is a
// top-level WikiText heading " = Title = " (not " = = Section = = ").
func isWikiTitle(line string) bool {
	return len(line) > 6 && strings.HasPrefix(line, " = ") && strings.HasSuffix(line, " = ") &&
		!strings.HasPrefix(line, " = = ")
}

// loadWikiText reads a WikiText raw file (CRLF or LF line endings) and
// splits it into articles, each starting at a top-level heading line
// " = Title = ". Text = Prompt = the article's lines, heading included,
// joined by "\n" (WikiText's own spacing, e.g. " @-@ ", kept); ID = the
// zero-based article position. Lines before the first heading, if any,
// form an article of their own.
func loadWikiText(_ Task, paths []string) ([]Example, error) {
	lines, err := readLines(paths[0])
	if err != nil {
		return nil, err
	}
	var ex []Example
	var art []string
	flush := func() {
		text := strings.Join(art, "\n")
		if strings.TrimSpace(text) != "" {
			ex = append(ex, Example{ID: strconv.Itoa(len(ex)), Prompt: text, Text: text})
		}
		art = art[:0]
	}
	for _, l := range lines {
		if isWikiTitle(l) {
			flush()
		}
		art = append(art, l)
	}
	flush()
	return ex, nil
}
