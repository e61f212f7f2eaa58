package tokenizer

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// This file is the ids-to-text half: the decoder of tokenizer.json (HF
// tokenizers crate: decoders/*.rs, pre_tokenizers/byte_level.rs and
// metaspace.rs as decoders), once as HF's whole-list chain (Decode) and once
// as a stream (Decoder) that gives the same text piece by piece.

// stepKind names a supported HF decoder component.
type stepKind int

const (
	stepReplace      stepKind = iota // Replace: per token, pattern → content
	stepStrip                        // Strip: per token, cut content chars at the ends
	stepMetaspace                    // Metaspace: ▁ → space, dropped in the first token
	stepByteFallback                 // ByteFallback: runs of <0xXX> tokens → UTF-8 text
	stepFuse                         // Fuse: join all tokens into one
	stepByteLevel                    // ByteLevel: byte-level chars → bytes, joined, lossy UTF-8
)

// decodeStep is one decoder component with its parameters.
type decodeStep struct {
	kind stepKind

	match   matcher // Replace
	literal string  // Replace: the String pattern ("" for a Regex)
	content string  // Replace: replacement

	strip       rune // Strip: the character cut
	start, stop int  // Strip: at most this many at the start / end

	repl      rune // Metaspace: the replacement character
	dropFirst bool // Metaspace: prepend_scheme is not "never"
}

// decoderSpec is the decoder of a tokenizer: its steps in order, or none
// (HF then joins the tokens with spaces).
type decoderSpec struct {
	none  bool
	steps []decodeStep
}

// parseDecoder builds the decoder of a tokenizer.json "decoder" value.
// Supported (HF decoders): Sequence, ByteLevel, Replace, ByteFallback, Fuse,
// Strip, Metaspace. The streaming decoder needs every step after the first
// Fuse or ByteLevel to work on a growing text, so ByteFallback, ByteLevel and
// a Regex Replace there are refused.
func parseDecoder(raw json.RawMessage, field string) (*decoderSpec, error) {
	if isNull(raw) {
		return &decoderSpec{none: true}, nil
	}
	d := &decoderSpec{}
	if err := d.add(raw, field); err != nil {
		return nil, err
	}
	fused := false
	for _, st := range d.steps {
		if fused && (st.kind == stepByteFallback || st.kind == stepByteLevel || (st.kind == stepReplace && st.literal == "" && st.match != nil)) {
			return nil, errf(field, "ByteFallback, ByteLevel or a Regex Replace after Fuse/ByteLevel is not supported")
		}
		if st.kind == stepFuse || st.kind == stepByteLevel {
			fused = true
		}
	}
	return d, nil
}

func (d *decoderSpec) add(raw json.RawMessage, field string) error {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return errf(field, "%v", err)
	}
	switch c.Type {
	case "Sequence":
		if err := eachInSequence(raw, field, "decoders", d.add); err != nil {
			return err
		}
	case "ByteLevel":
		d.steps = append(d.steps, decodeStep{kind: stepByteLevel})
	case "ByteFallback":
		d.steps = append(d.steps, decodeStep{kind: stepByteFallback})
	case "Fuse":
		d.steps = append(d.steps, decodeStep{kind: stepFuse})
	case "Replace":
		var p struct {
			Pattern json.RawMessage `json:"pattern"`
			Content string          `json:"content"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return errf(field, "%v", err)
		}
		m, err := compilePattern(p.Pattern, field+".pattern")
		if err != nil {
			return err
		}
		var pat pattern
		_ = json.Unmarshal(p.Pattern, &pat)
		st := decodeStep{kind: stepReplace, match: m, content: p.Content}
		if pat.String != nil {
			st.literal = *pat.String
			if st.literal == "" {
				st.match = nil // matches nothing
			}
		}
		d.steps = append(d.steps, st)
	case "Strip":
		var p struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return errf(field, "%v", err)
		}
		if utf8.RuneCountInString(p.Content) != 1 || p.Start < 0 || p.Stop < 0 {
			return errf(field, "want one content character and start, stop >= 0")
		}
		r, _ := utf8.DecodeRuneInString(p.Content)
		d.steps = append(d.steps, decodeStep{kind: stepStrip, strip: r, start: p.Start, stop: p.Stop})
	case "Metaspace":
		p := struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
		}{Replacement: "▁", PrependScheme: "always"}
		if err := json.Unmarshal(raw, &p); err != nil {
			return errf(field, "%v", err)
		}
		scheme, err := metaspaceScheme(p.PrependScheme, p.AddPrefixSpace, field)
		if err != nil {
			return err
		}
		if utf8.RuneCountInString(p.Replacement) != 1 {
			return errf(field+".replacement", "want one character, got %q", p.Replacement)
		}
		r, _ := utf8.DecodeRuneInString(p.Replacement)
		d.steps = append(d.steps, decodeStep{kind: stepMetaspace, repl: r, dropFirst: scheme != "never"})
	case "":
		return errf(field+".type", "missing")
	default:
		return errf(field+".type", "unsupported decoder %q", c.Type)
	}
	return nil
}

// decode is HF's Decoder::decode: every step's decode_chain over the whole
// token list, then the results concatenated (space-joined without a
// decoder).
func (d *decoderSpec) decode(tokens []string) string {
	if d.none {
		return strings.Join(tokens, " ")
	}
	for _, st := range d.steps {
		tokens = st.chain(tokens)
	}
	return strings.Join(tokens, "")
}

// chain is one step's decode_chain.
func (st *decodeStep) chain(tokens []string) []string {
	switch st.kind {
	case stepFuse:
		return []string{strings.Join(tokens, "")}
	case stepByteLevel:
		var buf []byte
		for _, t := range tokens {
			var ok bool
			if buf, ok = byteLevelBytes(t, buf); !ok {
				buf = append(buf, t...)
			}
		}
		text, _ := lossyUTF8(buf, true)
		return []string{text}
	case stepByteFallback:
		var out []string
		var run []byte
		for _, t := range tokens {
			if b, ok := byteToken(t); ok {
				run = append(run, b)
				continue
			}
			out = appendByteRun(out, run)
			run = run[:0]
			out = append(out, t)
		}
		return appendByteRun(out, run)
	}
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = st.apply(t, i)
	}
	return out
}

// apply is a per-token step on the i-th token.
func (st *decodeStep) apply(t string, i int) string {
	switch st.kind {
	case stepReplace:
		if st.match == nil {
			return t
		}
		if st.literal != "" {
			return strings.ReplaceAll(t, st.literal, st.content)
		}
		return replaceOrKeep(st.match, t, st.content)
	case stepStrip:
		rs := []rune(t)
		lo := 0
		for lo < st.start && lo < len(rs) && rs[lo] == st.strip {
			lo++
		}
		hi := len(rs)
		for n := 0; n < st.stop && hi > lo && rs[hi-1] == st.strip; n++ {
			hi--
		}
		return string(rs[lo:hi])
	case stepMetaspace:
		return metaspaceDecode(t, st.repl, i == 0 && st.dropFirst)
	}
	return t
}

// metaspaceDecode turns the replacement character into spaces, or drops it
// (HF Metaspace::decode_chain drops every one in the first token).
func metaspaceDecode(t string, repl rune, drop bool) string {
	if !strings.ContainsRune(t, repl) {
		return t
	}
	with := " "
	if drop {
		with = ""
	}
	return strings.ReplaceAll(t, string(repl), with)
}

// byteToken parses a byte-fallback token "<0xXX>" (HF ByteFallback: six
// bytes, and the two inside parse as a base-16 u8, where Rust also takes a
// leading '+').
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || t[:3] != "<0x" || t[5] != '>' {
		return 0, false
	}
	h := t[3:5]
	if h[0] == '+' {
		h = h[1:]
	}
	v := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= '0' && c <= '9':
			v = v*16 + int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v*16 + int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v*16 + int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return byte(v), true
}

// appendByteRun appends the text of a run of byte-fallback bytes: the run as
// one token when it is valid UTF-8, else one U+FFFD token per byte.
func appendByteRun(out []string, run []byte) []string {
	if len(run) == 0 {
		return out
	}
	if utf8.Valid(run) {
		return append(out, string(run))
	}
	for range run {
		out = append(out, "\uFFFD")
	}
	return out
}

// lossyUTF8 converts b to text as Rust's String::from_utf8_lossy does: each
// maximal prefix of a valid sequence that cannot be completed becomes one
// U+FFFD. Unless final, an incomplete sequence at the end is left out and n
// says how many bytes were used.
func lossyUTF8(b []byte, final bool) (text string, n int) {
	if utf8.Valid(b) {
		return string(b), len(b)
	}
	var sb strings.Builder
	for n < len(b) {
		r, size := utf8.DecodeRune(b[n:])
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[n : n+size])
			n += size
			continue
		}
		k, complete := invalidLen(b[n:])
		if !complete && !final {
			break
		}
		sb.WriteString("\uFFFD")
		n += k
	}
	return sb.String(), n
}

// invalidLen measures the invalid sequence at the start of b (whose first
// byte does not start a valid character): the first byte plus the following
// bytes that still fit a valid encoding. complete is false when b ends while
// they still fit, so more bytes could make a character.
func invalidLen(b []byte) (int, bool) {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, true
	}
	for i := 1; i <= need; i++ {
		if i >= len(b) {
			return i, false
		}
		if b[i] < lo || b[i] > hi {
			return i, true
		}
		lo, hi = 0x80, 0xBF
	}
	return need + 1, true // unreachable for an invalid start, kept for safety
}

// Decoder turns a stream of ids into text, piece by piece, giving exactly
// what Tokenizer.Decode gives for the whole list. Text is held back while it
// may still change: an incomplete UTF-8 character of byte-level tokens, a run
// of byte-fallback tokens (an invalid byte anywhere in the run turns the
// whole run into U+FFFD characters), trailing characters a Strip may cut.
// After Flush it starts afresh. A Decoder is not safe for concurrent use.
type Decoder struct {
	t *Tokenizer

	ntok  int        // tokens passed so far (no-decoder spacing)
	count []int      // per step: tokens that reached it (Metaspace's first token)
	runs  [][]byte   // per ByteFallback step: the pending run of bytes
	bytes []byte     // ByteLevel: bytes not yet turned into text
	text  []textTail // per step after fusing: its pending state
}

// textTail is the pending state of a text step (one after Fuse/ByteLevel).
type textTail struct {
	started bool   // Strip: past the leading characters
	cut     int    // Strip: leading characters cut so far
	held    string // Strip: trailing strip chars; Replace: a possible pattern prefix
}

// NewDecoder returns a streaming decoder (see Decoder).
func (t *Tokenizer) NewDecoder() *Decoder {
	d := &Decoder{t: t}
	d.reset()
	return d
}

func (d *Decoder) reset() {
	n := len(d.t.dec.steps)
	d.ntok = 0
	d.count = make([]int, n)
	d.runs = make([][]byte, n)
	d.bytes = d.bytes[:0]
	d.text = make([]textTail, n)
}

// Add takes the next id and returns the text that is final so far; never
// part of a UTF-8 character. Special tokens and unknown ids give "".
func (d *Decoder) Add(id int) string {
	tok, ok := d.t.decodable(id)
	if !ok {
		return ""
	}
	if d.t.dec.none {
		d.ntok++
		if d.ntok > 1 {
			return " " + tok
		}
		return tok
	}
	return d.run(0, []string{tok}, false)
}

// Flush returns the rest of the text and resets the decoder.
func (d *Decoder) Flush() string {
	if d.t.dec.none {
		d.reset()
		return ""
	}
	out := d.run(0, nil, true)
	d.reset()
	return out
}

// run passes tokens through the steps from i on. Before the first Fuse or
// ByteLevel the steps work on tokens; from it on the tokens are one text that
// grows, passed on as chunks. final flushes every step in order.
func (d *Decoder) run(i int, toks []string, final bool) string {
	steps := d.t.dec.steps
	for ; i < len(steps); i++ {
		st := &steps[i]
		switch st.kind {
		case stepFuse:
			return d.runText(i+1, strings.Join(toks, ""), final)
		case stepByteLevel:
			for _, t := range toks {
				var ok bool
				if d.bytes, ok = byteLevelBytes(t, d.bytes); !ok {
					d.bytes = append(d.bytes, t...)
				}
			}
			text, n := lossyUTF8(d.bytes, final)
			d.bytes = append(d.bytes[:0], d.bytes[n:]...)
			return d.runText(i+1, text, final)
		case stepByteFallback:
			var out []string
			for _, t := range toks {
				if b, ok := byteToken(t); ok {
					d.runs[i] = append(d.runs[i], b)
					continue
				}
				out = appendByteRun(out, d.runs[i])
				d.runs[i] = d.runs[i][:0]
				out = append(out, t)
			}
			if final {
				out = appendByteRun(out, d.runs[i])
				d.runs[i] = d.runs[i][:0]
			}
			toks = out
		default:
			for j, t := range toks {
				toks[j] = st.apply(t, d.count[i])
				d.count[i]++
			}
		}
	}
	return strings.Join(toks, "")
}

// runText passes a chunk of the fused text through the text steps from i on.
func (d *Decoder) runText(i int, chunk string, final bool) string {
	steps := d.t.dec.steps
	for ; i < len(steps); i++ {
		st, tail := &steps[i], &d.text[i]
		switch st.kind {
		case stepStrip:
			chunk = tail.strip(st, chunk, final)
		case stepReplace:
			chunk = tail.replace(st, chunk, final)
		case stepMetaspace:
			// After fusing there is one token, the first.
			chunk = metaspaceDecode(chunk, st.repl, st.dropFirst)
		}
	}
	return chunk
}

// strip cuts up to start strip characters at the very beginning, and holds
// back up to stop trailing ones until the text goes on or ends.
func (tail *textTail) strip(st *decodeStep, chunk string, final bool) string {
	if !tail.started {
		for tail.cut < st.start {
			r, size := utf8.DecodeRuneInString(chunk)
			if size == 0 || r != st.strip {
				break
			}
			chunk = chunk[size:]
			tail.cut++
		}
		// A character that is kept, or the last one cut, ends the start.
		tail.started = chunk != "" || tail.cut >= st.start
	}
	if st.stop == 0 {
		return chunk
	}
	s := tail.held + chunk
	// Hold the trailing strip characters, at most stop of them.
	k := len(s)
	for n := 0; n < st.stop; n++ {
		r, size := utf8.DecodeLastRuneInString(s[:k])
		if size == 0 || r != st.strip {
			break
		}
		k -= size
	}
	if final {
		tail.held = ""
		return s[:k]
	}
	tail.held = s[k:]
	return s[:k]
}

// replace replaces the literal pattern in the growing text, holding back a
// tail that may be the start of a match.
func (tail *textTail) replace(st *decodeStep, chunk string, final bool) string {
	if st.match == nil {
		return chunk
	}
	s := tail.held + chunk
	tail.held = ""
	if !final {
		for k := min(len(st.literal)-1, len(s)); k > 0; k-- {
			if strings.HasSuffix(s, st.literal[:k]) {
				tail.held = s[len(s)-k:]
				s = s[:len(s)-k]
				break
			}
		}
	}
	return strings.ReplaceAll(s, st.literal, st.content)
}

// replaceOrKeep is replaceAll for a decoder step: a regex that runs past its
// time bound on the token's text (one that passed the load-time probes of
// compileFileRegex) leaves the text as it is, since decoding has no error
// to return.
func replaceOrKeep(m matcher, t, content string) (out string) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(regexTimedOut); !ok {
				panic(r)
			}
			out = t
		}
	}()
	return replaceAll(m, t, content)
}

// TokenBytes returns the bytes token id adds to the decoded text when it is
// neither the first token nor at the end (the decoder's per-token steps:
// byte-level characters back to bytes, <0xXX> to its byte, ▁ to a space,
// Replace patterns; Strip, which cuts only at the ends of the text, and
// Metaspace's first-token rule are left out). Special tokens and unknown ids
// give nil. The bytes may be part of a UTF-8 character. Structured output
// steps a grammar over them; logprobs report them.
func (t *Tokenizer) TokenBytes(id int) []byte {
	tok, ok := t.decodable(id)
	if !ok {
		return nil
	}
	if t.dec.none {
		return []byte(" " + tok)
	}
	for i := range t.dec.steps {
		st := &t.dec.steps[i]
		switch st.kind {
		case stepByteLevel:
			if b, ok := byteLevelBytes(tok, nil); ok {
				tok = string(b)
			}
		case stepByteFallback:
			if b, ok := byteToken(tok); ok {
				tok = string([]byte{b})
			}
		case stepReplace, stepMetaspace:
			tok = st.apply(tok, 1)
		}
	}
	return []byte(tok)
}
