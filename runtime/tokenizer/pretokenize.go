package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// This file holds the text-to-pieces half of encoding: the normalizers and
// the pre-tokenizers of tokenizer.json, each a small function built once by
// New from its JSON component (HF tokenizers crate: normalizers/*.rs,
// pre_tokenizers/*.rs).

// normalizer rewrites one segment of input text (the text between added
// tokens), like a HF Normalizer applied to a NormalizedString.
type normalizer func(string) string

// piece is one pre-token: the text the model will see, and whether it
// starts at offset 0 of the original input (Metaspace's "first" scheme
// needs it).
type piece struct {
	text    string
	atStart bool
}

// emitFunc receives one pre-token; false stops the encoding (a token limit
// was passed).
type emitFunc func(piece) bool

// preTokenizer splits (and may rewrite) one piece, like a HF PreTokenizer on
// a PreTokenizedString, handing the resulting pieces to emit in order as it
// finds them (so an encoding can stop part way through a long text); it
// returns false as soon as emit does. Empty pieces are dropped, as HF drops
// empty splits.
type preTokenizer func(p piece, emit emitFunc) bool

// component is the part of every tokenizer.json component object that names
// its kind.
type component struct {
	Type string `json:"type"`
}

// pattern is the {"String": s} or {"Regex": r} object of Split and Replace.
type pattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// eachInSequence calls f on each element of the list under key of a
// "Sequence" component (normalizers, pretokenizers, decoders, processors),
// with the element's field path; it stops at the first error.
func eachInSequence(raw json.RawMessage, field, key string, f func(json.RawMessage, string) error) error {
	var seq map[string]json.RawMessage
	if err := json.Unmarshal(raw, &seq); err != nil {
		return errf(field, "%v", err)
	}
	var items []json.RawMessage
	if r, ok := seq[key]; ok && !isNull(r) {
		if err := json.Unmarshal(r, &items); err != nil {
			return errf(field+"."+key, "%v", err)
		}
	}
	for i, r := range items {
		if err := f(r, fmt.Sprintf("%s.%s[%d]", field, key, i)); err != nil {
			return err
		}
	}
	return nil
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

// compileRegex compiles a regex with regexp2 in its default (.NET-like,
// backtracking) syntax, which has look-ahead, \p{..} classes and inline
// (?i:..) groups like the Oniguruma engine HF uses. The backtracking stack is
// unbounded so long inputs never fail to match; instead each search for the
// next match runs for at most regexTimeout (regexMatches then stops the encoding
// with an error naming the pattern).
func compileRegex(expr string) (*regexp2.Regexp, error) {
	re, err := regexp2.Compile(expr, regexp2.None, regexp2.OptionMaxBacktrackingStackSize(-1))
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = regexTimeout
	return re, nil
}

// regexTimeout bounds each search of a tokenizer regex for its next match
// (regexp2's MatchTimeout). Sane patterns take microseconds per match.
var regexTimeout = time.Second

// probeTimeout bounds each probe of compileFileRegex.
var probeTimeout = 100 * time.Millisecond

// regexProbes are inputs on which a pattern that backtracks exponentially
// (such as (a+)+$) runs for seconds to years: 28 repeats of a character of
// each common class, then one that ends a match attempt.
var regexProbes = func() []string {
	var ps []string
	for _, unit := range []string{"a", "A", "aA", "0", " ", "\n", "\t", "é", "_", "-", ".", "a ", "ab", "a0"} {
		for _, end := range []string{"!", "\x00"} {
			ps = append(ps, strings.Repeat(unit, 28)+end)
		}
	}
	return ps
}()

// compileFileRegex compiles a regex read from a file (a Split or Replace
// pattern) and rejects one that backtracks catastrophically on a probe
// (regexProbes, each bounded by probeTimeout), before it can hang an
// encoding.
func compileFileRegex(expr string) (*regexp2.Regexp, error) {
	re, err := compileRegex(expr)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = probeTimeout
	for _, p := range regexProbes {
		if _, err := re.FindAllStringIndex(p, -1); err != nil {
			return nil, fmt.Errorf("pattern %q backtracks catastrophically: matching %q ran past %v (it would hang encoding); refused", expr, p, probeTimeout)
		}
	}
	re.MatchTimeout = regexTimeout
	return re, nil
}

// regexTimedOut is the panic value of regexMatches when a search runs past
// regexTimeout; Tokenizer.EncodeChecked recovers it into an *Error.
type regexTimedOut struct {
	field, expr string
	n           int // bytes of the piece searched
}

// matcher calls yield with the byte offsets of each match of a pattern in s,
// left to right, until yield returns false.
type matcher func(s string, yield func(start, end int) bool)

// compilePattern turns a pattern object into a matcher: a String pattern
// matches literally (non-overlapping, left to right; an empty one never), a
// Regex pattern with regexp2 (leftmost-first).
func compilePattern(raw json.RawMessage, field string) (matcher, error) {
	var p pattern
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, errf(field, "%v", err)
	}
	switch {
	case p.String != nil:
		lit := *p.String
		return func(s string, yield func(start, end int) bool) { literalMatches(lit, s, yield) }, nil
	case p.Regex != nil:
		re, err := compileFileRegex(*p.Regex)
		if err != nil {
			return nil, errf(field+".Regex", "%v", err)
		}
		return func(s string, yield func(start, end int) bool) { regexMatches(re, field+".Regex", s, yield) }, nil
	}
	return nil, errf(field, "want {\"String\": ...} or {\"Regex\": ...}")
}

// literalMatches yields the non-overlapping occurrences of lit in s, left to
// right (none for an empty lit).
func literalMatches(lit, s string, yield func(start, end int) bool) {
	if lit == "" {
		return
	}
	for i := 0; ; {
		j := strings.Index(s[i:], lit)
		if j < 0 || !yield(i+j, i+j+len(lit)) {
			return
		}
		i += j + len(lit)
	}
}

// regexMatches yields the byte offsets of the leftmost-first matches of re
// in s, one search at a time (regexp2's FindRunesMatches, which reuses its
// storage), so that a caller that stops early pays only for the matches it
// took. A search that runs past re's MatchTimeout (the only regexp2 failure
// here: the stack is unbounded) panics with a regexTimedOut naming field,
// which EncodeChecked turns into an error.
func regexMatches(re *regexp2.Regexp, field, s string, yield func(start, end int) bool) {
	runes := []rune(s) // invalid bytes become one U+FFFD each, as DecodeRuneInString steps them
	ascii := len(runes) == len(s)
	ri, bi := 0, 0 // rune index ri starts at byte bi; matches only move it forward
	byteAt := func(r int) int {
		if ascii {
			return r
		}
		for ; ri < r; ri++ {
			_, n := utf8.DecodeRuneInString(s[bi:])
			bi += n
		}
		return bi
	}
	err := re.FindRunesMatches(runes, 0, func(m regexp2.MatchView) bool {
		idx, n, _ := m.GroupRange(0)
		start := byteAt(idx)
		return yield(start, byteAt(idx+n))
	})
	if err != nil {
		panic(regexTimedOut{field: field, expr: re.String(), n: len(s)})
	}
}

// replaceAll replaces every match of m in s with content, taken literally
// (HF Replace normalizer and decoder).
func replaceAll(m matcher, s, content string) string {
	var b strings.Builder
	prev, matched := 0, false
	m(s, func(start, end int) bool {
		b.WriteString(s[prev:start])
		b.WriteString(content)
		prev, matched = end, true
		return true
	})
	if !matched {
		return s
	}
	b.WriteString(s[prev:])
	return b.String()
}

// parseNormalizer builds the normalizer of a tokenizer.json "normalizer"
// value; nil means none. Supported (HF normalizers): Sequence, NFC, NFD,
// NFKC, NFKD, Prepend, Replace, Strip.
func parseNormalizer(raw json.RawMessage, field string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, errf(field, "%v", err)
	}
	switch c.Type {
	case "Sequence":
		var steps []normalizer
		err := eachInSequence(raw, field, "normalizers", func(r json.RawMessage, f string) error {
			n, err := parseNormalizer(r, f)
			if n != nil {
				steps = append(steps, n)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, nil
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, errf(field, "%v", err)
		}
		return func(s string) string {
			if s == "" {
				return s
			}
			return p.Prepend + s
		}, nil
	case "Replace":
		var p struct {
			Pattern json.RawMessage `json:"pattern"`
			Content string          `json:"content"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, errf(field, "%v", err)
		}
		m, err := compilePattern(p.Pattern, field+".pattern")
		if err != nil {
			return nil, err
		}
		return func(s string) string { return replaceAll(m, s, p.Content) }, nil
	case "Strip":
		var p struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, errf(field, "%v", err)
		}
		return func(s string) string {
			if p.Left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if p.Right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, nil
	case "":
		return nil, errf(field+".type", "missing")
	}
	return nil, errf(field+".type", "unsupported normalizer %q", c.Type)
}

// splitBehavior is HF's SplitDelimiterBehavior: what becomes of the matched
// delimiters.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            splitRemoved,
	"Isolated":           splitIsolated,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// span is a byte range of a string and whether it is a match (delimiter).
type span struct {
	start, end int
	match      bool
}

// splitter cuts one piece at a stream of matches following behavior (HF
// NormalizedString::split), emitting each resulting piece as soon as no
// later span can change it (one span is held back for the merging
// behaviors), and dropping empty ones. invert swaps which spans count as
// delimiters (HF Split invert). Feed it with match, then call finish.
type splitter struct {
	p         piece
	behavior  splitBehavior
	invert    bool
	emit      emitFunc
	rewrite   func(string) string // applied to each piece's text; nil: none
	prev      int                 // end of the spans fed so far
	cur       span                // the piece held back
	held      bool
	prevMatch bool // the last span fed was a delimiter
	ok        bool // false once emit has said stop
}

func newSplitter(p piece, behavior splitBehavior, invert bool, emit emitFunc) *splitter {
	return &splitter{p: p, behavior: behavior, invert: invert, emit: emit, ok: true}
}

// match feeds the match [start, end) and the gap before it; false: stop.
func (sp *splitter) match(start, end int) bool {
	if sp.prev != start {
		sp.add(span{sp.prev, start, sp.invert})
	}
	sp.add(span{start, end, !sp.invert})
	sp.prev = end
	return sp.ok
}

// finish feeds the gap after the last match and emits what is held; false:
// emit said stop.
func (sp *splitter) finish() bool {
	if sp.prev != len(sp.p.text) {
		sp.add(span{sp.prev, len(sp.p.text), sp.invert})
	}
	if sp.held {
		sp.out(sp.cur.start, sp.cur.end)
	}
	return sp.ok
}

func (sp *splitter) add(x span) {
	if !sp.ok {
		return
	}
	switch sp.behavior {
	case splitIsolated:
		sp.out(x.start, x.end)
	case splitRemoved:
		if !x.match {
			sp.out(x.start, x.end)
		}
	case splitContiguous: // runs of delimiters, and runs of the rest
		if sp.held && x.match == sp.prevMatch {
			sp.cur.end = x.end
		} else {
			sp.flush(x)
		}
	case splitMergedWithPrevious: // a delimiter joins the piece before it
		if sp.held && x.match && !sp.prevMatch {
			sp.cur.end = x.end
		} else {
			sp.flush(x)
		}
	case splitMergedWithNext: // a delimiter joins the non-delimiter after it
		if sp.held { // a delimiter
			if !x.match {
				sp.held = false
				sp.out(sp.cur.start, x.end)
				break
			}
			sp.out(sp.cur.start, sp.cur.end)
			sp.held = false
		}
		if x.match {
			sp.cur, sp.held = x, true
		} else {
			sp.out(x.start, x.end)
		}
	}
	sp.prevMatch = x.match
}

// flush emits the held piece and holds x instead.
func (sp *splitter) flush(x span) {
	if sp.held {
		sp.out(sp.cur.start, sp.cur.end)
	}
	sp.cur, sp.held = x, true
}

func (sp *splitter) out(start, end int) {
	if start == end || !sp.ok {
		return
	}
	text := sp.p.text[start:end]
	if sp.rewrite != nil {
		text = sp.rewrite(text)
	}
	sp.ok = sp.emit(piece{text: text, atStart: sp.p.atStart && start == 0})
}

// splitEach cuts p at the matches m yields, emitting the pieces in order,
// their text rewritten by rewrite when set.
func splitEach(p piece, m matcher, behavior splitBehavior, invert bool, emit emitFunc, rewrite func(string) string) bool {
	if p.text == "" {
		return true
	}
	sp := newSplitter(p, behavior, invert, emit)
	sp.rewrite = rewrite
	m(p.text, sp.match)
	return sp.finish()
}

// gpt2Pattern is the split regex of ByteLevel with use_regex (GPT-2's
// encoder.py pattern, as in HF pre_tokenizers/byte_level.rs).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteToRune is GPT-2's bytes_to_unicode table: every byte maps to a
// printable character; printable Latin-1 bytes map to themselves, the rest to
// U+0100 upwards in byte order. runeToByte is its inverse (-1: not a
// byte-level character).
var byteToRune, runeToByte = buildByteLevelTables()

func buildByteLevelTables() ([256]rune, [0x144]int16) {
	var b2r [256]rune
	var r2b [0x144]int16
	for i := range r2b {
		r2b[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = int16(b)
	}
	return b2r, r2b
}

// byteLevelString maps every byte of s to its byte-level character.
func byteLevelString(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToRune[s[i]])
	}
	return b.String()
}

// byteLevelBytes inverts byteLevelString for one token: ok is false when a
// character is not a byte-level character (HF then keeps the token's own
// UTF-8 bytes).
func byteLevelBytes(tok string, dst []byte) ([]byte, bool) {
	n := len(dst)
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return dst[:n], false
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst, true
}

// parsePreTokenizer builds the pre-tokenizer of a tokenizer.json
// "pre_tokenizer" value; nil means none. Supported (HF pre_tokenizers):
// Sequence, Split, ByteLevel, Metaspace, Digits.
func parsePreTokenizer(raw json.RawMessage, field string) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, errf(field, "%v", err)
	}
	switch c.Type {
	case "Sequence":
		var steps []preTokenizer
		err := eachInSequence(raw, field, "pretokenizers", func(r json.RawMessage, f string) error {
			p, err := parsePreTokenizer(r, f)
			if p != nil {
				steps = append(steps, p)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return chain(steps), nil
	case "Split":
		var p struct {
			Pattern  json.RawMessage `json:"pattern"`
			Behavior string          `json:"behavior"`
			Invert   bool            `json:"invert"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, errf(field, "%v", err)
		}
		m, err := compilePattern(p.Pattern, field+".pattern")
		if err != nil {
			return nil, err
		}
		behavior, ok := splitBehaviors[p.Behavior]
		if !ok {
			return nil, errf(field+".behavior", "unsupported %q", p.Behavior)
		}
		return func(pc piece, emit emitFunc) bool {
			return splitEach(pc, m, behavior, p.Invert, emit, nil)
		}, nil
	case "ByteLevel":
		p := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{UseRegex: true}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, errf(field, "%v", err)
		}
		var m matcher
		if p.UseRegex {
			re, err := compileRegex(gpt2Pattern)
			if err != nil {
				return nil, errf(field, "%v", err)
			}
			m = func(s string, yield func(start, end int) bool) { regexMatches(re, field, s, yield) }
		}
		return func(pc piece, emit emitFunc) bool {
			if p.AddPrefixSpace && !strings.HasPrefix(pc.text, " ") {
				pc.text = " " + pc.text
			}
			if m == nil {
				if pc.text == "" {
					return true
				}
				pc.text = byteLevelString(pc.text)
				return emit(pc)
			}
			return splitEach(pc, m, splitIsolated, false, emit, byteLevelString)
		}, nil
	case "Metaspace":
		p := struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			Split          *bool  `json:"split"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
		}{Replacement: "▁", PrependScheme: "always"}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, errf(field, "%v", err)
		}
		scheme, err := metaspaceScheme(p.PrependScheme, p.AddPrefixSpace, field)
		if err != nil {
			return nil, err
		}
		if utf8.RuneCountInString(p.Replacement) != 1 {
			return nil, errf(field+".replacement", "want one character, got %q", p.Replacement)
		}
		split := p.Split == nil || *p.Split
		repl := p.Replacement
		replMatches := func(s string, yield func(start, end int) bool) { literalMatches(repl, s, yield) }
		return func(pc piece, emit emitFunc) bool {
			pc.text = strings.ReplaceAll(pc.text, " ", repl)
			if scheme == "always" || (scheme == "first" && pc.atStart) {
				if !strings.HasPrefix(pc.text, repl) {
					pc.text = repl + pc.text
				}
			}
			if !split {
				return pc.text == "" || emit(pc)
			}
			return splitEach(pc, replMatches, splitMergedWithNext, false, emit, nil)
		}, nil
	case "Digits":
		var p struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, errf(field, "%v", err)
		}
		behavior := splitContiguous
		if p.Individual {
			behavior = splitIsolated
		}
		digits := func(s string, yield func(start, end int) bool) {
			for i, r := range s {
				if unicode.IsNumber(r) && !yield(i, i+utf8.RuneLen(r)) {
					return
				}
			}
		}
		return func(pc piece, emit emitFunc) bool {
			return splitEach(pc, digits, behavior, false, emit, nil)
		}, nil
	case "":
		return nil, errf(field+".type", "missing")
	}
	return nil, errf(field+".type", "unsupported pre-tokenizer %q", c.Type)
}

// chain runs pre-tokenizers in sequence: each piece a step emits goes
// through the rest before the step looks for its next piece.
func chain(steps []preTokenizer) preTokenizer {
	switch len(steps) {
	case 0:
		return func(p piece, emit emitFunc) bool { return p.text == "" || emit(p) }
	case 1:
		return steps[0]
	}
	first, rest := steps[0], chain(steps[1:])
	return func(p piece, emit emitFunc) bool {
		return first(p, func(q piece) bool { return rest(q, emit) })
	}
}

// metaspaceScheme resolves Metaspace's prepend_scheme, with the legacy
// add_prefix_space false meaning "never".
func metaspaceScheme(scheme string, addPrefixSpace *bool, field string) (string, error) {
	switch scheme {
	case "always", "first", "never":
	default:
		return "", errf(field+".prepend_scheme", "unsupported %q", scheme)
	}
	if addPrefixSpace != nil && !*addPrefixSpace {
		scheme = "never"
	}
	return scheme, nil
}
