// Package metrics implements the evaluation metrics sinf reports for its task
// datasets: SQuAD exact match and F1 (the official SQuAD v2.0 evaluation
// script), corpus BLEU as sacreBLEU computes it by default (13a tokenisation,
// exponential smoothing), ROUGE-1/2/L as Google's rouge-score package computes
// it (without stemming), and perplexity.
//
// The reference implementations are Python programs, so the text handling
// here mirrors Python's: whitespace is what Python's str.split() splits on,
// and lower-casing follows str.lower() for the characters where Go's simple
// case mapping differs in a way that matters (see pyLower).
package metrics

import (
	"strings"
	"unicode"
)

// pyIsSpace reports whether r is whitespace for Python's str.split() and
// str.strip(): Go's unicode.IsSpace plus the ASCII information separators
// U+001C..U+001F, which Python also treats as whitespace.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyFields splits s like Python's s.split() with no argument.
func pyFields(s string) []string {
	return strings.FieldsFunc(s, pyIsSpace)
}

// pyRstrip removes trailing whitespace like Python's s.rstrip().
func pyRstrip(s string) string {
	return strings.TrimRightFunc(s, pyIsSpace)
}

// pyLower lower-cases s like Python's str.lower() for the cases relevant to
// the metrics: Go's strings.ToLower uses the simple (one rune to one rune)
// mapping, Python the full mapping, which differs for U+0130 (capital I with
// dot above → "i" + U+0307 combining dot). Final-sigma context handling
// (Σ → ς at the end of a word) is not reproduced: Σ always becomes σ.
func pyLower(s string) string {
	if strings.ContainsRune(s, 'İ') {
		s = strings.ReplaceAll(s, "İ", "i\u0307")
	}
	return strings.ToLower(s)
}
