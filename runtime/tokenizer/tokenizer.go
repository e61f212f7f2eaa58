// Package tokenizer reads a HuggingFace tokenizer.json (and, when present,
// tokenizer_config.json) and encodes text to token ids and decodes ids to
// text exactly as the HF tokenizers crate does, for the BPE tokenizers of
// Llama-family models: byte-level BPE (GPT-2, Llama-3, Qwen) and
// SentencePiece-style BPE with byte fallback (Llama-2, TinyStories).
//
// Encoding follows HF's pipeline: added tokens are split out of the text
// first (AddedVocabulary), each remaining segment is normalized, split into
// pre-tokens (PreTokenizer), and each pre-token is encoded by the BPE model.
// Supported components:
//
//   - model: BPE (merges as "a b" strings or ["a","b"] pairs; byte_fallback,
//     unk_token with fuse_unk, ignore_merges, continuing_subword_prefix,
//     end_of_word_suffix). WordPiece, Unigram and WordLevel are refused.
//     A BPE model with no merges whose vocabulary has tokens of several
//     characters encodes character by character, as HF does, with a
//     warning (Warnings): the merges were probably lost.
//   - normalizer: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip.
//   - pre_tokenizer: Sequence, Split, ByteLevel, Metaspace, Digits.
//   - post_processor: TemplateProcessing (its leading special token is the
//     BOS), ByteLevel (ids unchanged), Sequence of these.
//   - decoder: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip,
//     Metaspace.
//
// Pre-tokens are produced lazily (each regex match as it is found), so
// EncodeWith can stop a text as soon as it passes a token limit, and can
// encode chosen byte ranges (a chat message's content) with special tokens
// taken as plain text.
//
// Invalid UTF-8 given to Encode is first replaced the way Rust's
// String::from_utf8_lossy and Python's bytes.decode(errors="replace") do:
// each maximal invalid sequence becomes one U+FFFD (HF itself only takes
// valid strings).
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/selectinfer/sinf/format"
)

// Error is a problem with a tokenizer file: which tokenizer, which file,
// which JSON field (a path such as "model.merges[12]"), and what.
type Error struct {
	Name  string // the name given to New (the directory for Load)
	File  string // "tokenizer.json" or "tokenizer_config.json"
	Field string // JSON path of the offending value, "" for the whole file
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("tokenizer %s: %s: %s", e.Name, e.File, e.Msg)
	}
	return fmt.Sprintf("tokenizer %s: %s: %s: %s", e.Name, e.File, e.Field, e.Msg)
}

// addedToken is one entry of tokenizer.json "added_tokens" (HF AddedToken).
// ID is the id HF assigns, not necessarily the one written (see build).
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// Tokenizer encodes and decodes text. It is safe for concurrent use.
type Tokenizer struct {
	name      string
	model     *bpe
	normalize normalizer   // nil: none
	preTok    preTokenizer // nil: the whole segment is one pre-token
	dec       *decoderSpec

	added    []addedToken
	rawTrie  *addedTrie // added tokens matched in the input as given
	normTrie *addedTrie // added tokens matched in the normalized input

	pieces  []string // id → token text (added tokens override the vocab)
	present []bool   // id has a token
	special []bool   // id is a special token, skipped by Decode
	// decodeAs holds the normalized form of normalized added tokens whose
	// form differs: HF (0.23) decodes them from it.
	decodeAs map[int]string

	addsBOS bool
	bos     int
	eos     []int

	warnings []string // see Warnings
}

// Warnings returns sentences about a tokenizer file that loads but is
// probably broken, for the user (empty for a sound file): a BPE vocabulary
// with tokens of several characters and no merges to build them.
func (t *Tokenizer) Warnings() []string { return t.warnings }

// Load reads dir/tokenizer.json and, when present, dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	tj, err := format.ReadRegularFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cj, err := format.ReadRegularFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		cj = nil
	} else if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return New(dir, tj, cj)
}

// tokenizerFile is the top level of tokenizer.json.
type tokenizerFile struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

// configFile is the part of tokenizer_config.json used here.
type configFile struct {
	AddBOS *bool           `json:"add_bos_token"`
	BOS    json.RawMessage `json:"bos_token"`
	EOS    json.RawMessage `json:"eos_token"`
}

// New builds a tokenizer from the bytes of tokenizer.json and
// tokenizer_config.json (configJSON may be nil). name labels errors, which
// are *Error values naming the file and the JSON field; components outside
// those listed in the package documentation are refused.
func New(name string, tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	t, err := build(name, tokenizerJSON)
	if err != nil {
		return nil, err
	}
	if err := t.readConfig(configJSON); err != nil {
		return nil, err
	}
	return t, nil
}

// fieldErr is an error at a JSON path, from the component parsers; New
// turns it into an Error naming the file.
type fieldErr struct {
	field, msg string
}

func (e *fieldErr) Error() string { return e.field + ": " + e.msg }

func errf(field, format string, args ...any) error {
	return &fieldErr{field: field, msg: fmt.Sprintf(format, args...)}
}

// fileError wraps a component parser's error as an Error of file.
func fileError(name, file string, err error) *Error {
	var fe *fieldErr
	if errors.As(err, &fe) {
		return &Error{Name: name, File: file, Field: fe.field, Msg: fe.msg}
	}
	return &Error{Name: name, File: file, Msg: err.Error()}
}

func build(name string, data []byte) (*Tokenizer, error) {
	const file = "tokenizer.json"
	var tj tokenizerFile
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, &Error{Name: name, File: file, Msg: "bad JSON: " + err.Error()}
	}
	t := &Tokenizer{name: name, bos: -1}

	// Model.
	if isNull(tj.Model) {
		return nil, &Error{Name: name, File: file, Field: "model", Msg: "missing"}
	}
	var m bpeJSON
	if err := json.Unmarshal(tj.Model, &m); err != nil || m.Type != "BPE" {
		// Files from before "type" was written are BPE when they have merges.
		if err == nil && m.Type == "" && m.Merges != nil {
			m.Type = "BPE"
		} else {
			var head struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(tj.Model, &head) == nil && head.Type != "BPE" {
				return nil, &Error{Name: name, File: file, Field: "model.type", Msg: fmt.Sprintf("unsupported model type %q (only BPE)", head.Type)}
			}
			return nil, &Error{Name: name, File: file, Field: "model", Msg: fmt.Sprint(err)}
		}
	}
	model, err := newBPE(&m, "model")
	if err != nil {
		return nil, fileError(name, file, err)
	}
	t.model = model

	// Components.
	if t.normalize, err = parseNormalizer(tj.Normalizer, "normalizer"); err != nil {
		return nil, fileError(name, file, err)
	}
	if t.preTok, err = parsePreTokenizer(tj.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, fileError(name, file, err)
	}
	if t.dec, err = parseDecoder(tj.Decoder, "decoder"); err != nil {
		return nil, fileError(name, file, err)
	}

	// Added tokens get their ids as HF's AddedVocabulary gives them, which
	// for a consistent file are the ids written: a content already in the
	// vocabulary keeps its vocabulary id, a new one takes the next id from
	// the vocabulary's size on. A repeated content keeps its first id and
	// takes the last flags.
	next := len(m.Vocab)
	byContent := map[string]int{}
	for _, a := range tj.AddedTokens {
		if a.Content == "" {
			continue // HF ignores empty added tokens
		}
		if a.Normalized == nil {
			n := !a.Special
			a.Normalized = &n
		}
		if i, ok := byContent[a.Content]; ok {
			a.ID = t.added[i].ID
			t.added[i] = a
			continue
		}
		if id, ok := m.Vocab[a.Content]; ok {
			a.ID = id
		} else {
			a.ID = next
			next++
		}
		byContent[a.Content] = len(t.added)
		t.added = append(t.added, a)
	}

	// Id table: the vocabulary, then the added tokens over it.
	size := 0
	for _, id := range m.Vocab {
		size = max(size, id+1)
	}
	for _, a := range t.added {
		size = max(size, a.ID+1)
	}
	if entries := len(m.Vocab) + len(t.added); size > 4*entries+1024 {
		return nil, &Error{Name: name, File: file, Field: "model.vocab", Msg: fmt.Sprintf("ids up to %d for %d tokens are too sparse", size-1, entries)}
	}
	t.pieces = make([]string, size)
	t.present = make([]bool, size)
	t.special = make([]bool, size)
	for tok, id := range m.Vocab {
		t.pieces[id] = tok
		t.present[id] = true
	}
	specialContent := map[string]bool{}
	for _, a := range t.added {
		t.pieces[a.ID] = a.Content
		t.present[a.ID] = true
		if a.Special {
			specialContent[a.Content] = true
		}
	}
	for id, p := range t.pieces {
		t.special[id] = t.present[id] && specialContent[p]
	}
	if w := mergelessWarning(&m, byContent); w != "" {
		t.warnings = append(t.warnings, fmt.Sprintf("tokenizer %s: %s: %s", name, file, w))
	}

	// Added-token matchers. Normalized tokens are matched in their
	// normalized form (HF AddedVocabulary).
	t.rawTrie, t.normTrie = &addedTrie{}, &addedTrie{}
	t.decodeAs = map[int]string{}
	for i, a := range t.added {
		if *a.Normalized {
			content := a.Content
			if t.normalize != nil {
				content = t.normalize(content)
			}
			t.normTrie.insert(content, i)
			if content != a.Content {
				t.decodeAs[a.ID] = content
			}
		} else {
			t.rawTrie.insert(a.Content, i)
		}
	}

	// BOS from the post-processor template.
	if err := t.readPostProcessor(tj.PostProcessor, "post_processor"); err != nil {
		return nil, fileError(name, file, err)
	}
	return t, nil
}

// readPostProcessor takes the BOS from a TemplateProcessing whose "single"
// template starts with a special token (HF processors/template.rs).
func (t *Tokenizer) readPostProcessor(raw json.RawMessage, field string) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return errf(field, "%v", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil // only adjusts offsets
	case "Sequence":
		return eachInSequence(raw, field, "processors", t.readPostProcessor)
	case "TemplateProcessing":
		var p struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return errf(field, "%v", err)
		}
		if len(p.Single) == 0 || p.Single[0].SpecialToken == nil {
			return nil
		}
		name := p.Single[0].SpecialToken.ID
		st, ok := p.SpecialTokens[name]
		if !ok || len(st.IDs) != 1 {
			return errf(field+".special_tokens", "want one id for %q", name)
		}
		if st.IDs[0] < 0 || st.IDs[0] >= len(t.pieces) {
			return errf(field+".special_tokens", "id %d of %q is outside the vocabulary", st.IDs[0], name)
		}
		t.bos, t.addsBOS = st.IDs[0], true
		return nil
	case "":
		return errf(field+".type", "missing")
	}
	return errf(field+".type", "unsupported post-processor %q", c.Type)
}

// readConfig applies tokenizer_config.json: add_bos_token and bos_token
// (which take precedence over the template, as transformers'
// LlamaTokenizerFast rebuilds its template from them) and eos_token.
func (t *Tokenizer) readConfig(data []byte) error {
	if data == nil {
		return nil
	}
	const file = "tokenizer_config.json"
	var c configFile
	if err := json.Unmarshal(data, &c); err != nil {
		return &Error{Name: t.name, File: file, Msg: "bad JSON: " + err.Error()}
	}
	bos, err := t.configToken(c.BOS)
	if err != nil {
		return &Error{Name: t.name, File: file, Field: "bos_token", Msg: err.Error()}
	}
	if bos >= 0 && (c.AddBOS != nil || !t.addsBOS) {
		t.bos = bos
	}
	if c.AddBOS != nil {
		if *c.AddBOS && t.bos < 0 {
			return &Error{Name: t.name, File: file, Field: "add_bos_token", Msg: "true without a bos_token"}
		}
		t.addsBOS = *c.AddBOS
	}
	eos, err := t.configToken(c.EOS)
	if err != nil {
		return &Error{Name: t.name, File: file, Field: "eos_token", Msg: err.Error()}
	}
	if eos >= 0 {
		t.eos = []int{eos}
	}
	return nil
}

// configToken resolves a config token (a string, or an object with
// "content", or null) to its id; -1 for null.
func (t *Tokenizer) configToken(raw json.RawMessage) (int, error) {
	if isNull(raw) {
		return -1, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var obj struct {
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
			return -1, fmt.Errorf("want a string or an object with \"content\", got %s", raw)
		}
		s = *obj.Content
	}
	if id, ok := t.tokenID(s); ok {
		return id, nil
	}
	return -1, fmt.Errorf("%q is not a token", s)
}

// tokenID looks a token up: added tokens first, then the vocabulary.
func (t *Tokenizer) tokenID(s string) (int, bool) {
	for _, a := range t.added {
		if a.Content == s {
			return a.ID, true
		}
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Encode returns the token ids of text (HF Tokenizer::encode with
// add_special_tokens=false), preceded by the BOS id when addBOS is true and
// the tokenizer has one. Added tokens written in the text, special or not,
// become their ids. Where a regex of the file runs past its time bound on
// the text, Encode returns nil: commands encoding a user's text call
// EncodeChecked, which says so.
func (t *Tokenizer) Encode(text string, addBOS bool) []int {
	ids, _ := t.EncodeChecked(text, addBOS)
	return ids
}

// EncodeChecked is Encode with an error: a Split pre-tokenizer or Replace
// normalizer regex of tokenizer.json whose search for a match in this text
// ran past its time bound (one second per search; patterns that backtrack
// catastrophically on simple inputs are refused when the file is read) is
// an *Error naming the tokenizer, the file, the field and the pattern.
func (t *Tokenizer) EncodeChecked(text string, addBOS bool) (ids []int, err error) {
	return t.EncodeWith(text, EncodeOptions{AddBOS: addBOS})
}

// EncodeOptions configures EncodeWith.
type EncodeOptions struct {
	AddBOS bool // prepend the BOS id (when the tokenizer has one)
	// MaxTokens > 0 bounds the ids (BOS included): the encoding stops as
	// soon as it holds more, with a *TooLongError, so that a long text
	// costs time and memory in proportion to the limit, not to its length
	// (text is pre-tokenized lazily; one pre-token, such as a run of
	// letters, is encoded whole before the count is checked).
	MaxTokens int
	// Plain lists byte ranges of text in which special added tokens are
	// not recognized: a special token's text there is encoded as ordinary
	// text, as HF does for the whole text with split_special_tokens=True.
	// Non-special added tokens still match. A chat prompt marks its
	// message contents so (runtime/chat RenderPlain). Where the normalizer
	// runs first (normalized added tokens), no special token is recognized
	// in a segment between added tokens that overlaps a plain range. For a
	// text that is not valid UTF-8 and has plain ranges, no special token
	// is recognized anywhere.
	Plain []Span
}

// Span is a byte range [Start, End) of a text.
type Span struct{ Start, End int }

// TooLongError is EncodeWith's error when the text encodes to more than
// EncodeOptions.MaxTokens ids.
type TooLongError struct {
	Limit int // EncodeOptions.MaxTokens
	Bytes int // bytes of the text
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("the text (%d bytes) encodes to more than %d tokens", e.Bytes, e.Limit)
}

// EncodeWith is EncodeChecked with the options: a token limit (a
// *TooLongError past it) and plain ranges. Errors: *TooLongError, or an
// *Error for a regex past its time bound (see EncodeChecked).
func (t *Tokenizer) EncodeWith(text string, o EncodeOptions) (ids []int, err error) {
	defer func() {
		if r := recover(); r != nil {
			rt, ok := r.(regexTimedOut)
			if !ok {
				panic(r)
			}
			ids, err = nil, &Error{Name: t.name, File: "tokenizer.json", Field: rt.field,
				Msg: fmt.Sprintf("pattern %q ran past its time bound of %v on a piece of %d bytes; the text is not encoded", rt.expr, regexTimeout, rt.n)}
		}
	}()
	return t.encode(text, o)
}

// inPlain reports whether [start, end) overlaps a span of plain.
func inPlain(plain []Span, start, end int) bool {
	for _, p := range plain {
		if start < p.End && p.Start < end {
			return true
		}
	}
	return false
}

func (t *Tokenizer) encode(text string, o EncodeOptions) ([]int, error) {
	plain := o.Plain
	if !utf8.ValidString(text) {
		text, _ = lossyUTF8([]byte(text), true)
		if len(plain) > 0 {
			plain = []Span{{0, len(text)}}
		}
	}
	n := len(text)/3 + 2
	if o.MaxTokens > 0 {
		n = min(n, o.MaxTokens+1)
	}
	ids := make([]int, 0, n)
	if o.AddBOS && t.bos >= 0 {
		ids = append(ids, t.bos)
	}
	over := func() bool { return o.MaxTokens > 0 && len(ids) > o.MaxTokens }
	tooLong := &TooLongError{Limit: o.MaxTokens, Bytes: len(text)}
	emit := func(p piece) bool {
		ids = t.model.tokenize(p.text, ids)
		return !over()
	}
	var rawSkip, normSkip func(start, end int, a *addedToken) bool
	if len(plain) > 0 {
		rawSkip = func(start, end int, a *addedToken) bool { return a.Special && inPlain(plain, start, end) }
	}
	for _, sp := range t.splitAdded(text, t.rawTrie, rawSkip) {
		if sp.tok >= 0 {
			ids = append(ids, t.added[sp.tok].ID)
			if over() {
				return nil, tooLong
			}
			continue
		}
		seg := text[sp.start:sp.end]
		atStart := sp.start == 0
		if t.normalize != nil {
			seg = t.normalize(seg)
		}
		normSkip = nil
		if inPlain(plain, sp.start, sp.end) {
			normSkip = func(_, _ int, a *addedToken) bool { return a.Special }
		}
		for _, sp2 := range t.splitAdded(seg, t.normTrie, normSkip) {
			if sp2.tok >= 0 {
				ids = append(ids, t.added[sp2.tok].ID)
				if over() {
					return nil, tooLong
				}
				continue
			}
			p := piece{text: seg[sp2.start:sp2.end], atStart: atStart && sp2.start == 0}
			var ok bool
			if t.preTok != nil {
				ok = t.preTok(p, emit)
			} else {
				ok = emit(p)
			}
			if !ok {
				return nil, tooLong
			}
		}
	}
	return ids, nil
}

// AddsBOS reports whether the config files ask for a BOS at the start of
// an encoded text (tokenizer_config.json add_bos_token, else a
// TemplateProcessing post-processor that starts with a special token).
// Special tokens a template puts after the text are not added by Encode.
func (t *Tokenizer) AddsBOS() bool { return t.addsBOS }

// SpecialTokens returns the text of each special added token
// (tokenizer.json added_tokens with special true), in file order: the
// control tokens a chat prompt keeps out of message content.
func (t *Tokenizer) SpecialTokens() []string {
	var out []string
	for _, a := range t.added {
		if a.Special {
			out = append(out, a.Content)
		}
	}
	return out
}

// BOS returns the beginning-of-sequence id, -1 if none.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS returns the end-of-sequence ids named by tokenizer_config.json
// eos_token; may be empty.
func (t *Tokenizer) EOS() []int { return append([]int(nil), t.eos...) }

// VocabSize returns the largest id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// Token returns the raw vocabulary piece of id (byte-level or ▁ form), ""
// for an unknown id.
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// decodable returns the piece of id to decode, false for unknown ids and
// special tokens (which HF skips with skip_special_tokens).
func (t *Tokenizer) decodable(id int) (string, bool) {
	if id < 0 || id >= len(t.pieces) || !t.present[id] || t.special[id] {
		return "", false
	}
	if s, ok := t.decodeAs[id]; ok {
		return s, true
	}
	return t.pieces[id], true
}

// Decode returns the text of ids (HF Tokenizer::decode with
// skip_special_tokens=true): special tokens and unknown ids are skipped, the
// rest go through the decoder. Byte sequences that are not valid UTF-8
// become U+FFFD. transformers' clean_up_tokenization_spaces (a Python-side
// step) is not applied. Special added tokens marked normalized are skipped
// too, where HF 0.23 lets them through (it looks them up by their
// normalized form).
func (t *Tokenizer) Decode(ids []int) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if s, ok := t.decodable(id); ok {
			toks = append(toks, s)
		}
	}
	return t.dec.decode(toks)
}

// addedTrie finds added tokens in text: a byte trie searched leftmost-
// longest, like HF's Aho-Corasick with MatchKind::LeftmostLongest.
type addedTrie struct {
	nodes []trieNode
	first [256]bool // bytes that start some token
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index in Tokenizer.added, -1 if no token ends here
}

func (tr *addedTrie) insert(s string, tok int) {
	if s == "" {
		return
	}
	if len(tr.nodes) == 0 {
		tr.nodes = append(tr.nodes, trieNode{tok: -1})
	}
	tr.first[s[0]] = true
	n := int32(0)
	for i := 0; i < len(s); i++ {
		nx, ok := tr.nodes[n].next[s[i]]
		if !ok {
			nx = int32(len(tr.nodes))
			tr.nodes = append(tr.nodes, trieNode{tok: -1})
			if tr.nodes[n].next == nil {
				tr.nodes[n].next = map[byte]int32{}
			}
			tr.nodes[n].next[s[i]] = nx
		}
		n = nx
	}
	if tr.nodes[n].tok < 0 { // the first of equal contents wins
		tr.nodes[n].tok = int32(tok)
	}
}

// longest returns the end and token of the longest token starting at i, or
// tok -1.
func (tr *addedTrie) longest(s string, i int) (end, tok int) {
	tok = -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := tr.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if t := tr.nodes[n].tok; t >= 0 {
			end, tok = j+1, int(t)
		}
	}
	return end, tok
}

// addedSpan is a byte range of a segment: an added token (tok >= 0, an
// index in Tokenizer.added) or text (tok -1).
type addedSpan struct {
	start, end, tok int
}

// splitAdded cuts s into text and added tokens (HF
// AddedVocabulary::find_matches): leftmost-longest matches, dropped when
// single_word and inside a word, widened over whitespace for lstrip/rstrip.
// Empty text spans are left out. A match for which skip (when set) is true
// is not a match: the search goes on from its next byte.
func (t *Tokenizer) splitAdded(s string, tr *addedTrie, skip func(start, end int, a *addedToken) bool) []addedSpan {
	if len(tr.nodes) == 0 {
		if s == "" {
			return nil
		}
		return []addedSpan{{0, len(s), -1}}
	}
	var out []addedSpan
	prev := 0 // end of the last emitted span
	for i := 0; i < len(s); {
		if !tr.first[s[i]] {
			i++
			continue
		}
		end, tok := tr.longest(s, i)
		if tok < 0 {
			i++
			continue
		}
		a := &t.added[tok]
		if skip != nil && skip(i, end, a) {
			i++
			continue
		}
		start := i
		i = end
		if a.SingleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			continue
		}
		if a.LStrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), prev)
		}
		if a.RStrip {
			end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			i = end
		}
		if prev < start {
			out = append(out, addedSpan{prev, start, -1})
		}
		out = append(out, addedSpan{start, end, tok})
		prev = end
	}
	if prev < len(s) {
		out = append(out, addedSpan{prev, len(s), -1})
	}
	return out
}

// isWordChar is Rust regex's Unicode \w: alphabetic, marks, decimal digits,
// connector punctuation and the joiners.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, size := utf8.DecodeLastRuneInString(s)
	return size > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, size := utf8.DecodeRuneInString(s)
	return size > 0 && isWordChar(r)
}
