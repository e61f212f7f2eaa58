package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// readJSONL decodes each non-blank line of the JSON Lines file path with
// decode. Errors name the file and the 1-based line number.
func readJSONL(path string, decode func(line []byte, lineNo int) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s:%d: %w", path, lineNo, err)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if derr := decode(t, lineNo); derr != nil {
				return fmt.Errorf("%s:%d: %w", path, lineNo, derr)
			}
		}
		if err != nil { // io.EOF
			return nil
		}
	}
}

// readLines returns the lines of a plain-text file without their line
// endings ("\n" or "\r\n"); a final line ending does not start another line.
func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\n"), nil
}

// promptLine is one line of a user prompt file.
type promptLine struct {
	ID        json.RawMessage `json:"id"`
	Prompt    *string         `json:"prompt"`
	Reference json.RawMessage `json:"reference"`
}

// PromptsTask is the task describing a user prompt file at path.
func PromptsTask(path string) Task {
	return Task{
		Name:        path,
		Kind:        KindPrompts,
		Description: "user prompt file (JSONL: prompt, optional id and reference)",
		Template:    "{prompt}",
	}
}

// LoadPrompts reads a user prompt file: JSON Lines, one object per line with
// a string field "prompt" (required, not empty; used verbatim as the Prompt), an
// optional "id" (string or number; default: the zero-based position of the
// example) and an optional "reference" (a string or a list of strings,
// becoming Refs). Blank lines are skipped. A malformed line is an error
// naming the file and the line number; a file without any example is an
// error naming the file.
func LoadPrompts(path string) ([]Example, error) {
	var ex []Example
	err := readJSONL(path, func(line []byte, _ int) error {
		var p promptLine
		if err := json.Unmarshal(line, &p); err != nil {
			return err
		}
		if p.Prompt == nil {
			return errors.New(`missing string field "prompt"`)
		}
		if *p.Prompt == "" {
			return errors.New(`field "prompt" is empty`)
		}
		e := Example{ID: strconv.Itoa(len(ex)), Prompt: *p.Prompt}
		if id, ok, err := jsonScalar(p.ID); err != nil {
			return fmt.Errorf(`field "id": %w`, err)
		} else if ok {
			e.ID = id
		}
		refs, err := jsonStrings(p.Reference)
		if err != nil {
			return fmt.Errorf(`field "reference": %w`, err)
		}
		e.Refs = refs
		ex = append(ex, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prompt file: %w", err)
	}
	if len(ex) == 0 {
		return nil, fmt.Errorf("prompt file %s: %w", path, errEmpty)
	}
	return ex, nil
}

// jsonScalar returns a JSON string or number as text; ok is false for an
// absent or null value.
func jsonScalar(raw json.RawMessage) (s string, ok bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if raw[0] == '"' {
		err = json.Unmarshal(raw, &s)
		return s, err == nil, err
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", false, errors.New("want a string or a number")
	}
	return n.String(), true, nil
}

// jsonStrings accepts a JSON string (one element) or a list of strings; an
// absent or null value gives nil.
func jsonStrings(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, nil
	}
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, errors.New("want a string or a list of strings")
	}
	return l, nil
}
