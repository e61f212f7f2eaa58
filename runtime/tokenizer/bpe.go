package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// This file is the BPE model of tokenizer.json (HF tokenizers crate:
// models/bpe/model.rs and word.rs): a pre-token is split into characters,
// each looked up in the vocabulary (unknown ones become byte-fallback
// <0xXX> tokens or the unk token), then the lowest-ranked merge among
// adjacent pairs is applied until none applies.

// bpeJSON is the "model" object of a BPE tokenizer.json.
type bpeJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int    `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

// bpeMerge is the result of merging one pair of ids: its rank (lower merges
// first) and the merged token's id.
type bpeMerge struct {
	rank, id int32
}

// bpeCacheSize bounds the pre-token cache; bpeCacheMaxLen is the longest
// pre-token (in bytes) that is cached, as in HF.
const (
	bpeCacheSize   = 10000
	bpeCacheMaxLen = 256
)

// bpe is a BPE model.
type bpe struct {
	vocab        map[string]int
	merges       map[uint64]bpeMerge // key: left id << 32 | right id
	unkID        int                 // -1: unknown characters are dropped
	fuseUnk      bool
	byteFallback bool
	byteIDs      [256]int // <0xXX> token ids, -1 where missing
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	mu    sync.Mutex
	cache map[string][]int
}

// newBPE builds the model from its JSON object. field is the JSON path of the
// object, for errors.
func newBPE(m *bpeJSON, field string) (*bpe, error) {
	if m.Vocab == nil {
		return nil, errf(field+".vocab", "missing")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, errf(field+".dropout", "BPE dropout %v is not supported (encoding is deterministic)", *m.Dropout)
	}
	b := &bpe{
		vocab:        m.Vocab,
		merges:       make(map[uint64]bpeMerge, len(m.Merges)),
		unkID:        -1,
		fuseUnk:      m.FuseUnk,
		byteFallback: m.ByteFallback,
		ignoreMerges: m.IgnoreMerges,
		cache:        make(map[string][]int),
	}
	for tok, id := range m.Vocab {
		if id < 0 || id > 1<<31-1 {
			return nil, errf(fmt.Sprintf("%s.vocab[%q]", field, tok), "bad id %d", id)
		}
	}
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	// An unk token missing from the vocabulary would make HF fail on the
	// first unknown character; here such characters are dropped instead.
	if m.UnkToken != nil {
		if id, ok := m.Vocab[*m.UnkToken]; ok {
			b.unkID = id
		}
	}
	for i := range b.byteIDs {
		b.byteIDs[i] = -1
		if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteIDs[i] = id
		}
	}
	for i, raw := range m.Merges {
		left, right, err := parseMerge(raw)
		if err != nil {
			return nil, errf(fmt.Sprintf("%s.merges[%d]", field, i), "%v", err)
		}
		l, ok := m.Vocab[left]
		if !ok {
			return nil, errf(fmt.Sprintf("%s.merges[%d]", field, i), "%q is not in the vocabulary", left)
		}
		r, ok := m.Vocab[right]
		if !ok {
			return nil, errf(fmt.Sprintf("%s.merges[%d]", field, i), "%q is not in the vocabulary", right)
		}
		if len(right) < len(b.prefix) {
			return nil, errf(fmt.Sprintf("%s.merges[%d]", field, i), "%q is shorter than continuing_subword_prefix", right)
		}
		merged := left + right[len(b.prefix):]
		id, ok := m.Vocab[merged]
		if !ok {
			return nil, errf(fmt.Sprintf("%s.merges[%d]", field, i), "merged token %q is not in the vocabulary", merged)
		}
		// A repeated pair keeps its last rank, as HF's map does.
		b.merges[pairKey(l, r)] = bpeMerge{rank: int32(i), id: int32(id)}
	}
	return b, nil
}

// mergelessWarning returns the warning for a BPE model with no merges whose
// vocabulary has tokens of more than one character, or "". Encoding splits
// each pre-token into characters and only merges join them (HF does the
// same), so such tokens are never produced: the merges were probably lost
// when the file was written. A token is not counted when it is reachable
// without merges: an added token (matched in the text), the unk token, a
// <0xXX> byte-fallback token, or one character with the
// continuing_subword_prefix before it or the end_of_word_suffix after it;
// ignore_merges (whole pre-tokens looked up first) reaches any token.
func mergelessWarning(m *bpeJSON, added map[string]int) string {
	if len(m.Merges) > 0 || m.IgnoreMerges {
		return ""
	}
	var multi []string
	for tok := range m.Vocab {
		if _, ok := added[tok]; ok || (m.UnkToken != nil && tok == *m.UnkToken) || isByteToken(tok) {
			continue
		}
		core := tok
		if m.ContinuingSubwordPrefix != nil {
			core = strings.TrimPrefix(core, *m.ContinuingSubwordPrefix)
		}
		if m.EndOfWordSuffix != nil {
			core = strings.TrimSuffix(core, *m.EndOfWordSuffix)
		}
		if utf8.RuneCountInString(core) > 1 {
			multi = append(multi, tok)
		}
	}
	if len(multi) == 0 {
		return ""
	}
	sort.Strings(multi)
	examples := make([]string, 0, 3)
	for _, tok := range multi[:min(3, len(multi))] {
		examples = append(examples, strconv.Quote(tok))
	}
	count := fmt.Sprintf("%d tokens", len(multi))
	if len(multi) == 1 {
		count = "1 token"
	}
	return fmt.Sprintf("model.merges is empty, but model.vocab has %s of more than one character (such as %s), which only merges build: text is encoded character by character (as HF does), so the file is probably broken (were its merges lost?)",
		count, strings.Join(examples, ", "))
}

// isByteToken reports whether tok is a byte-fallback token <0xXX>.
func isByteToken(tok string) bool {
	return len(tok) == 6 && strings.HasPrefix(tok, "<0x") && tok[5] == '>' && isHex(tok[3]) && isHex(tok[4])
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' || 'a' <= c && c <= 'f' }

// parseMerge reads one merges entry: "left right" or ["left", "right"].
func parseMerge(raw json.RawMessage) (string, string, error) {
	if l, r, ok := parseMergeFast(raw); ok {
		return l, r, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return splitMerge(s)
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("want \"left right\" or [\"left\", \"right\"], got %s", raw)
	}
	return pair[0], pair[1], nil
}

// splitMerge splits the legacy "left right" form, which must have exactly
// one space (HF convert_merges_to_hashmap).
func splitMerge(s string) (string, string, error) {
	l, r, ok := strings.Cut(s, " ")
	if !ok || strings.Contains(r, " ") {
		return "", "", fmt.Errorf("want \"left right\", got %q", s)
	}
	return l, r, nil
}

// parseMergeFast reads the common forms without escapes faster than
// encoding/json; ok is false when it cannot (the caller then uses
// encoding/json).
func parseMergeFast(raw []byte) (string, string, bool) {
	if bytes.IndexByte(raw, '\\') >= 0 || len(raw) < 2 {
		return "", "", false
	}
	str := func(b []byte) (string, []byte, bool) {
		b = bytes.TrimLeft(b, " \t\r\n")
		if len(b) == 0 || b[0] != '"' {
			return "", nil, false
		}
		end := bytes.IndexByte(b[1:], '"')
		if end < 0 {
			return "", nil, false
		}
		return string(b[1 : 1+end]), bytes.TrimLeft(b[2+end:], " \t\r\n"), true
	}
	if raw[0] == '"' {
		s, rest, ok := str(raw)
		if !ok || len(rest) != 0 {
			return "", "", false
		}
		l, r, err := splitMerge(s)
		return l, r, err == nil
	}
	if raw[0] != '[' {
		return "", "", false
	}
	l, rest, ok := str(raw[1:])
	if !ok || len(rest) == 0 || rest[0] != ',' {
		return "", "", false
	}
	r, rest, ok := str(rest[1:])
	if !ok || len(rest) != 1 || rest[0] != ']' {
		return "", "", false
	}
	return l, r, true
}

func pairKey(l, r int) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

// tokenize appends the ids of one pre-token to dst (HF BPE::tokenize).
func (b *bpe) tokenize(word string, dst []int) []int {
	if word == "" {
		return dst
	}
	if b.ignoreMerges {
		if id, ok := b.vocab[word]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(word) < bpeCacheMaxLen
	if cacheable {
		b.mu.Lock()
		ids, ok := b.cache[word]
		b.mu.Unlock()
		if ok {
			return append(dst, ids...)
		}
	}
	ids := b.mergeWord(word)
	if cacheable {
		b.mu.Lock()
		if len(b.cache) < bpeCacheSize {
			b.cache[word] = ids
		}
		b.mu.Unlock()
	}
	return append(dst, ids...)
}

// symbol is one token of a word being merged, in a doubly linked list over
// the symbols slice; size 0 marks a symbol merged into its left neighbour.
type symbol struct {
	id         int32
	prev, next int32 // indices, -1 at the ends
	size       int32 // bytes of the word covered
}

// mergeWord splits word into characters and applies the merges.
func (b *bpe) mergeWord(word string) []int {
	syms := make([]symbol, 0, len(word))
	add := func(id, size int) {
		n := int32(len(syms))
		if n > 0 {
			syms[n-1].next = n
		}
		syms = append(syms, symbol{id: int32(id), prev: n - 1, next: -1, size: int32(size)})
	}
	unkSize := 0 // bytes of a pending unk token, 0 if none
	var key []byte
	for i := 0; i < len(word); {
		_, size := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+size]
		first, last := i == 0, i+size == len(word)
		i += size
		var id int
		var ok bool
		if (first || b.prefix == "") && (!last || b.suffix == "") {
			id, ok = b.vocab[ch]
		} else {
			key = key[:0]
			if !first {
				key = append(key, b.prefix...)
			}
			key = append(key, ch...)
			if last {
				key = append(key, b.suffix...)
			}
			id, ok = b.vocab[string(key)]
		}
		if ok {
			if unkSize > 0 {
				add(b.unkID, unkSize)
				unkSize = 0
			}
			add(id, size)
			continue
		}
		if b.byteFallback && b.hasByteIDs(ch) {
			// HF adds the byte tokens without first flushing a pending unk.
			for j := 0; j < len(ch); j++ {
				add(b.byteIDs[ch[j]], 1)
			}
			continue
		}
		if b.unkID < 0 {
			continue // no unk token: the character is dropped, as in HF
		}
		if unkSize > 0 && !b.fuseUnk {
			add(b.unkID, unkSize)
			unkSize = 0
		}
		unkSize += size
	}
	if unkSize > 0 {
		add(b.unkID, unkSize)
	}
	b.applyMerges(syms)
	ids := make([]int, 0, len(syms))
	for _, s := range syms {
		if s.size > 0 {
			ids = append(ids, int(s.id))
		}
	}
	return ids
}

// hasByteIDs reports whether every byte of ch has a <0xXX> token.
func (b *bpe) hasByteIDs(ch string) bool {
	for j := 0; j < len(ch); j++ {
		if b.byteIDs[ch[j]] < 0 {
			return false
		}
	}
	return true
}

// mergeCandidate is a possible merge of the symbol at pos with its right
// neighbour into id.
type mergeCandidate struct {
	rank, pos, id int32
}

func (a mergeCandidate) less(b mergeCandidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// mergeHeap is a binary min-heap of candidates, lowest rank then leftmost
// first.
type mergeHeap []mergeCandidate

func (h *mergeHeap) push(c mergeCandidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeCandidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s[l].less(s[m]) {
			m = l
		}
		if r < n && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// applyMerges merges symbols in place: repeatedly the lowest-ranked merge
// among adjacent pairs (leftmost on ties), in O(n log n) (HF Word::merge_all
// without dropout).
func (b *bpe) applyMerges(syms []symbol) {
	if len(syms) < 2 || len(b.merges) == 0 {
		return
	}
	h := make(mergeHeap, 0, len(syms))
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := b.merges[pairKey(int(syms[i].id), int(syms[i+1].id))]; ok {
			h.push(mergeCandidate{rank: m.rank, pos: int32(i), id: m.id})
		}
	}
	for len(h) > 0 {
		c := h.pop()
		cur := &syms[c.pos]
		if cur.size == 0 || cur.next < 0 {
			continue
		}
		ri := cur.next
		right := syms[ri]
		// Skip a stale candidate: the pair at pos has changed since.
		if m, ok := b.merges[pairKey(int(cur.id), int(right.id))]; !ok || m.id != c.id {
			continue
		}
		cur.id = c.id
		cur.size += right.size
		cur.next = right.next
		syms[ri].size = 0 // merged away
		if right.next >= 0 {
			syms[right.next].prev = c.pos
		}
		if cur.prev >= 0 {
			p := syms[cur.prev]
			if m, ok := b.merges[pairKey(int(p.id), int(cur.id))]; ok {
				h.push(mergeCandidate{rank: m.rank, pos: cur.prev, id: m.id})
			}
		}
		if cur.next >= 0 {
			n := syms[cur.next]
			if m, ok := b.merges[pairKey(int(cur.id), int(n.id))]; ok {
				h.push(mergeCandidate{rank: m.rank, pos: c.pos, id: m.id})
			}
		}
	}
}
