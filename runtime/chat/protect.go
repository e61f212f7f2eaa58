package chat

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// protector swaps control-token text in a request's strings for
// placeholders and back (Template.RenderPrompt). A placeholder is
// "\uE000" + nonce + "." + index + "\uE001": private-use characters and
// digits, which no template filter (trim, upper, ...) changes, with a
// random 64-bit nonce that a request cannot guess.
type protector struct {
	tokens []string // the control-token strings, longest first
	prefix string   // "\uE000" + nonce + "."
	swap   *strings.Replacer
	// own: a request string holds U+E000 itself (then a leftover one in the
	// output is not taken for a cut placeholder).
	own bool
}

// newProtector returns nil for no tokens.
func newProtector(tokens []string) (*protector, error) {
	tokens = slices.DeleteFunc(slices.Clone(tokens), func(s string) bool { return s == "" })
	if len(tokens) == 0 {
		return nil, nil
	}
	// strings.Replacer tries its pairs in order at each position: longest
	// first is leftmost-longest, as a tokenizer matches added tokens.
	slices.SortStableFunc(tokens, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	tokens = slices.Compact(tokens)
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	p := &protector{tokens: tokens, prefix: "\uE000" + strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 10) + "."}
	pairs := make([]string, 0, 2*len(tokens))
	for i, tok := range tokens {
		pairs = append(pairs, tok, p.prefix+strconv.Itoa(i)+"\uE001")
	}
	p.swap = strings.NewReplacer(pairs...)
	return p, nil
}

// protect returns s with each control token swapped for its placeholder.
func (p *protector) protect(s string) string {
	if p == nil {
		return s
	}
	if strings.Contains(s, "\uE000") {
		p.own = true
	}
	return p.swap.Replace(s)
}

var errCutPlaceholder = errors.New("chat template: the template cut a message string inside a control token's text; the prompt is not sent")

// restore swaps the placeholders of rendered back for their tokens and
// records where they landed.
func (p *protector) restore(rendered string) (Prompt, error) {
	if !strings.Contains(rendered, "\uE000") {
		return Prompt{Text: rendered}, nil
	}
	var b strings.Builder
	b.Grow(len(rendered))
	var plain [][2]int
	for rest := rendered; ; {
		i := strings.Index(rest, p.prefix)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		rest = rest[i+len(p.prefix):]
		j := strings.Index(rest, "\uE001")
		if j < 0 {
			return Prompt{}, errCutPlaceholder
		}
		k, err := strconv.Atoi(rest[:j])
		if err != nil || k < 0 || k >= len(p.tokens) {
			return Prompt{}, errCutPlaceholder
		}
		start := b.Len()
		b.WriteString(p.tokens[k])
		plain = append(plain, [2]int{start, b.Len()})
		rest = rest[j+len("\uE001"):]
	}
	text := b.String()
	if strings.Contains(text, "\uE000") && !p.own {
		return Prompt{}, fmt.Errorf("%w (a placeholder is left)", errCutPlaceholder)
	}
	return Prompt{Text: text, Plain: plain}, nil
}
