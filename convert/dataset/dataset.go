// Package dataset loads the built-in evaluation and profiling datasets of
// sinf (samples of the sets the SelectInfer paper uses, kept in the shared
// data folder) and user prompt files, and turns each item into an Example
// whose Prompt is the full text fed to the model.
//
// Every built-in task has a fixed, documented prompt template (Task.Template,
// the doc comments on the loaders and README.md in this directory). Loading
// is deterministic: examples come in file order.
package dataset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Example is one evaluation/profiling item.
type Example struct {
	// ID identifies the item: the dataset's own id where it has one, else
	// the zero-based position in the file ("0", "1", ...).
	ID string
	// Prompt is the full prompt text fed to the model (template applied).
	Prompt string
	// Refs are the reference answers, translations or summaries. For an
	// unanswerable SQuAD v2 question Refs is empty: the only correct answer
	// is then "".
	Refs []string
	// Choices are the candidate continuations of a multiple-choice item
	// (PIQA: sol1, sol2); the prompt is the context and Label the index of
	// the correct choice.
	Choices []string
	Label   int
	// Text is the raw text of a perplexity item (the source of the token
	// windows).
	Text string
}

// Task kinds.
const (
	KindQA             = "qa"
	KindTranslation    = "translation"
	KindSummarization  = "summarization"
	KindMultipleChoice = "multiple_choice"
	KindPerplexity     = "perplexity"
	KindPrompts        = "prompts"
)

// Task describes a dataset: its name, kind (one of the Kind constants), a
// one-line description, and the prompt template: the literal prompt text
// with {placeholders} for the item's fields (e.g. {context}, {question},
// {src}, {document}); see the *Template constants and README.md.
type Task struct {
	Name        string
	Kind        string
	Description string
	Template    string
}

// builtin is a registered task and its loader.
type builtin struct {
	task Task
	// files are the data files relative to the data folder.
	files []string
	load  func(t Task, paths []string) ([]Example, error)
}

var builtins = map[string]builtin{}

func register(b builtin) {
	if _, dup := builtins[b.task.Name]; dup {
		panic("dataset: duplicate task " + b.task.Name)
	}
	builtins[b.task.Name] = b
}

// Names returns the sorted names of the built-in tasks.
func Names() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the built-in task called name; for an unknown name the
// error lists the known names.
func Lookup(name string) (Task, error) {
	b, ok := builtins[name]
	if !ok {
		return Task{}, fmt.Errorf("dataset: unknown task %q (known: %s; or give the path of a .jsonl prompt file)",
			name, strings.Join(Names(), ", "))
	}
	return b.task, nil
}

// Files returns the paths of the data files of the built-in task name under
// dataDir (the shared data folder), in the order the loader reads them.
func Files(name, dataDir string) ([]string, error) {
	b, ok := builtins[name]
	if !ok {
		_, err := Lookup(name)
		return nil, err
	}
	paths := make([]string, len(b.files))
	for i, f := range b.files {
		paths[i] = filepath.Join(dataDir, filepath.FromSlash(f))
	}
	return paths, nil
}

// Split names a part of a dataset, so that a model is never evaluated on
// the text it was profiled on: SplitProfile is the first half of the
// examples in file order, [0, ⌊n/2⌋); SplitEval the second half, [⌊n/2⌋, n);
// SplitAll every example. Halves rather than alternate items keep texts that
// share a passage (SQuAD's questions on one article, consecutive WikiText
// paragraphs) on one side.
type Split string

// The splits. The zero value is SplitAll.
const (
	SplitAll     Split = "all"
	SplitProfile Split = "profile"
	SplitEval    Split = "eval"
)

// ParseSplit parses "all", "profile" or "eval".
func ParseSplit(s string) (Split, error) {
	switch sp := Split(s); sp {
	case SplitAll, SplitProfile, SplitEval:
		return sp, nil
	}
	return "", fmt.Errorf("dataset: unknown split %q (want profile, eval or all)", s)
}

// Part returns the examples of ex in split sp (see Split); "" is SplitAll.
func Part(ex []Example, sp Split) []Example {
	switch sp {
	case SplitProfile:
		return ex[:len(ex)/2]
	case SplitEval:
		return ex[len(ex)/2:]
	}
	return ex
}

// Selection picks the examples a run reads: the split, then Offset examples
// of it skipped, then at most Limit (≤ 0: all).
type Selection struct {
	Split  Split
	Offset int
	Limit  int
}

// CheckFiles reports the first data file of the built-in task name missing
// under dataDir ("dataset NAME: data file: ..."), or an unknown name.
func CheckFiles(name, dataDir string) error {
	paths, err := Files(name, dataDir)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("dataset %s: data file: %w", name, err)
		}
	}
	return nil
}

// Load reads the dataset name and returns its task and examples in file
// order; limit ≤ 0 means all examples, else at most the first limit. It is
// LoadSelection with the whole dataset.
//
// name is either a built-in task name (see Names), whose files are read from
// dataDir (the shared data folder, e.g. ../shared/data), or the path of a
// JSONL prompt file (see LoadPrompts), used as given. A built-in name wins
// over a file of the same name. A name that is neither a built-in task nor
// an existing file nor a path (containing a slash or ending in .jsonl) is an
// error listing the known names.
//
// A missing data file is an error naming the path and the task; a dataset
// with no item is an error naming the file; a malformed line of a JSONL file
// is an error naming the file and the line number.
func Load(name, dataDir string, limit int) (Task, []Example, error) {
	return LoadSelection(name, dataDir, Selection{Limit: limit})
}

// LoadSelection is Load for the examples sel picks (see Selection). An
// offset that is negative or leaves no example of the split is an error
// naming the split's size.
func LoadSelection(name, dataDir string, sel Selection) (Task, []Example, error) {
	t, ex, err := loadAll(name, dataDir)
	if err != nil {
		return t, nil, err
	}
	part := Part(ex, sel.Split)
	if sel.Offset < 0 || sel.Offset >= len(part) {
		sp := sel.Split
		if sp == "" {
			sp = SplitAll
		}
		return t, nil, fmt.Errorf("dataset %s: offset %d outside the %s split's %d examples (of %d)", name, sel.Offset, sp, len(part), len(ex))
	}
	return t, truncate(part[sel.Offset:], sel.Limit), nil
}

func loadAll(name, dataDir string) (Task, []Example, error) {
	b, ok := builtins[name]
	if !ok {
		if looksLikePath(name) {
			ex, err := LoadPrompts(name)
			if err != nil {
				return Task{}, nil, err
			}
			return PromptsTask(name), ex, nil
		}
		_, err := Lookup(name)
		return Task{}, nil, err
	}
	if err := CheckFiles(name, dataDir); err != nil {
		return b.task, nil, err
	}
	paths, _ := Files(name, dataDir)
	ex, err := b.load(b.task, paths)
	if err != nil {
		return b.task, nil, fmt.Errorf("dataset %s: %w", name, err)
	}
	if len(ex) == 0 {
		return b.task, nil, fmt.Errorf("dataset %s: %s: %w", name, strings.Join(paths, ", "), errEmpty)
	}
	return b.task, ex, nil
}

var errEmpty = errors.New("no examples in the data file")

func looksLikePath(name string) bool {
	if strings.HasSuffix(name, ".jsonl") || strings.ContainsRune(name, os.PathSeparator) || strings.ContainsRune(name, '/') {
		return true
	}
	st, err := os.Stat(name)
	return err == nil && !st.IsDir()
}

func truncate(ex []Example, limit int) []Example {
	if limit > 0 && len(ex) > limit {
		return ex[:limit]
	}
	return ex
}

// Shard returns every n-th example of ex starting at index i (i, i+n,
// i+2n, ...), for splitting a dataset over n workers. It is an error when
// n ≤ 0, i < 0 or i ≥ n.
func Shard(ex []Example, i, n int) ([]Example, error) {
	if n <= 0 {
		return nil, fmt.Errorf("dataset: shard count %d must be positive", n)
	}
	if i < 0 || i >= n {
		return nil, fmt.Errorf("dataset: shard index %d out of range [0, %d)", i, n)
	}
	out := make([]Example, 0, (len(ex)-i+n-1)/n)
	for k := i; k < len(ex); k += n {
		out = append(out, ex[k])
	}
	return out, nil
}

// ParseShard parses a shard specification "I/N" (shard I of N, zero-based:
// 0 ≤ I < N) as used by Shard.
func ParseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("dataset: shard %q: want I/N", s)
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("dataset: shard %q: want I/N with integers I and N", s)
	}
	if n <= 0 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("dataset: shard %q: want 0 <= I < N", s)
	}
	return i, n, nil
}

// fill substitutes the {key} placeholders of template by the values in
// kv (key, value, key, value, ...). Values are not themselves scanned for
// placeholders.
func fill(template string, kv ...string) string {
	pairs := make([]string, 0, len(kv))
	for j := 0; j+1 < len(kv); j += 2 {
		pairs = append(pairs, "{"+kv[j]+"}", kv[j+1])
	}
	return strings.NewReplacer(pairs...).Replace(template)
}
