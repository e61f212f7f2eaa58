package constrain

import "bytes"

// Vocab is a vocabulary's token bytes as a trie, built once per tokenizer and
// shared by every Matcher (read-only, safe for concurrent use). Nodes are in
// preorder: node i's subtree is nodes [i, end[i]), and the tokens that end in
// it are toks[tokLo[i]:tokLo[end[i]]] (those ending at i itself first, up to
// tokLo[i+1]).
type Vocab struct {
	size  int     // token ids [0, size)
	b     []byte  // node → the byte leading to it (root: 0)
	end   []int32 // node → one past its subtree
	tokLo []int32 // node → first index in toks (len nodes+1)
	toks  []int32
	// plain[i]: every byte in node i's subtree is printable ASCII other than
	// '"' and '\\', so inside a string the whole subtree is allowed unstepped.
	plain []bool
	bytes [][]byte // id → bytes (nil: a special or unknown token)
	// Inside a string, from its plain state (no escape or UTF-8 character
	// pending), inString are the tokens that stay inside it whatever the
	// schema (no quote, backslash or control byte; UTF-8 well formed so
	// far), and quoted those with a quote or backslash after a valid start,
	// stepped one by one; the rest are never allowed there.
	inString, quoted []int32
}

// NewVocab builds the trie of size tokens; tokenBytes gives a token's bytes
// (tokenizer.TokenBytes: nil for special tokens, which a Matcher allows only
// as end-of-sequence).
func NewVocab(size int, tokenBytes func(id int) []byte) *Vocab {
	type tnode struct {
		kids  map[byte]*tnode
		order []byte
		toks  []int32
	}
	root := &tnode{}
	v := &Vocab{size: size, bytes: make([][]byte, size)}
	for id := range size {
		bs := tokenBytes(id)
		if len(bs) == 0 {
			continue
		}
		v.bytes[id] = bs
		n := root
		for _, c := range bs {
			k := n.kids[c]
			if k == nil {
				if n.kids == nil {
					n.kids = map[byte]*tnode{}
				}
				k = &tnode{}
				n.kids[c] = k
				n.order = append(n.order, c)
			}
			n = k
		}
		n.toks = append(n.toks, int32(id))
	}
	var walk func(n *tnode, c byte) bool
	walk = func(n *tnode, c byte) bool {
		i := len(v.b)
		v.b = append(v.b, c)
		v.end = append(v.end, 0)
		v.tokLo = append(v.tokLo, int32(len(v.toks)))
		v.plain = append(v.plain, false)
		v.toks = append(v.toks, n.toks...)
		plain := c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
		for _, k := range n.order {
			if !walk(n.kids[k], k) {
				plain = false
			}
		}
		v.end[i] = int32(len(v.b))
		v.plain[i] = plain
		return plain
	}
	walk(root, 0)
	v.tokLo = append(v.tokLo, int32(len(v.toks)))
	for id, bs := range v.bytes {
		if bs == nil {
			continue
		}
		s := state{top: frame{kind: fString}}
		in := true
		for _, c := range bs {
			if c == '"' || c == '\\' {
				v.quoted = append(v.quoted, int32(id))
				in = false
				break
			}
			if !s.stringByte(c) {
				in = false
				break
			}
		}
		if in {
			v.inString = append(v.inString, int32(id))
		}
	}
	return v
}

// Nodes returns the trie's node count (for figures).
func (v *Vocab) Nodes() int { return len(v.b) }

// Matcher is one document's automaton over a Vocab: runtime.Constraint.
// Not safe for concurrent use.
type Matcher struct {
	v    *Vocab
	eos  []int
	s    state
	ar   arena
	walk []state // per trie depth
}

// NewMatcher starts a document of schema root (JSONObject, Compile) over v;
// eos are the ids that end generation, allowed once the document is complete
// and only then.
func NewMatcher(root *Node, v *Vocab, eos []int) *Matcher {
	return &Matcher{v: v, eos: eos, s: newState(root, nil, nil)}
}

// NewMatcherAround is NewMatcher for a document between two fixed texts, as
// a tool call is written: prefix, then the root value, then suffix, each
// text exactly ("<tool_call>\n", "\n</tool_call>").
func NewMatcherAround(prefix string, root *Node, suffix string, v *Vocab, eos []int) *Matcher {
	return &Matcher{v: v, eos: eos, s: newState(root, []byte(prefix), []byte(suffix))}
}

// Done reports whether the document is complete (an end-of-sequence id may
// come).
func (m *Matcher) Done() bool { return m.s.done() }

func (m *Matcher) isEOS(id int) bool {
	for _, e := range m.eos {
		if e == id {
			return true
		}
	}
	return false
}

// Allowed reports whether token id may come next.
func (m *Matcher) Allowed(id int) bool {
	if m.isEOS(id) {
		return m.s.done()
	}
	if id < 0 || id >= len(m.v.bytes) || m.v.bytes[id] == nil {
		return false
	}
	s := m.s
	m.ar.reset()
	for _, c := range m.v.bytes[id] {
		if !s.step(&m.ar, c) {
			return false
		}
	}
	return true
}

// Accept advances past token id (end-of-sequence ids change nothing; an id
// Allowed refuses leaves the matcher as it was).
func (m *Matcher) Accept(id int) {
	if id < 0 || id >= len(m.v.bytes) || m.v.bytes[id] == nil {
		return
	}
	s := m.s
	for _, c := range m.v.bytes[id] {
		if !s.step(nil, c) {
			return
		}
	}
	m.s = s
}

// Mask sets allowed[id] for every token that may come next and returns how
// many. It walks the trie from the current state: a byte the automaton
// refuses cuts its subtree; inside a string a subtree of plain bytes is
// allowed whole.
func (m *Matcher) Mask(allowed []bool) int {
	m.ar.reset()
	count := 0
	if m.s.done() {
		for _, e := range m.eos {
			if e >= 0 && e < len(allowed) {
				allowed[e] = true
				count++
			}
		}
	}
	if len(m.walk) == 0 {
		m.walk = make([]state, 1, 64)
	}
	m.walk[0] = m.s
	if t := m.s.top; t.kind == fString && t.st == strPlain {
		for _, id := range m.v.inString {
			allowed[id] = true
		}
		count += len(m.v.inString)
		for _, id := range m.v.quoted {
			if m.Allowed(int(id)) {
				allowed[id] = true
				count++
			}
		}
	} else {
		count += m.visit(0, 0, allowed)
	}
	if !m.s.done() {
		for _, e := range m.eos { // an end id that has bytes too
			if e >= 0 && e < len(allowed) && allowed[e] {
				allowed[e] = false
				count--
			}
		}
	}
	return count
}

// visit allows the tokens below trie node i reached in state m.walk[depth].
func (m *Matcher) visit(i int32, depth int, allowed []bool) int {
	v := m.v
	if depth+1 >= len(m.walk) {
		m.walk = append(m.walk, state{})
	}
	cur := &m.walk[depth]
	plainOK := cur.top.kind == fString && cur.top.st == strPlain
	count := 0
	for j := i + 1; j < v.end[i]; j = v.end[j] {
		if plainOK && v.plain[j] {
			for _, id := range v.toks[v.tokLo[j]:v.tokLo[v.end[j]]] {
				allowed[id] = true
			}
			count += int(v.tokLo[v.end[j]] - v.tokLo[j])
			continue
		}
		next := &m.walk[depth+1]
		*next = *cur
		if !next.step(&m.ar, v.b[j]) {
			continue
		}
		for _, id := range v.toks[v.tokLo[j]:v.tokLo[j+1]] {
			allowed[id] = true
		}
		count += int(v.tokLo[j+1] - v.tokLo[j])
		if j+1 < v.end[j] {
			count += m.visit(j, depth+1, allowed)
			cur = &m.walk[depth] // visit may have grown m.walk
		}
	}
	return count
}

// jsonBytes are the bytes every JSON document of a schema may need as tokens
// of their own.
const jsonBytes = `{}[]":,-.0123456789truefalsn `

// Missing returns the bytes of JSON's punctuation, digits and literals that
// no token of v is alone, "" when v can spell any document; a model whose
// vocabulary lacks them (a story model without braces) cannot write JSON.
func (v *Vocab) Missing() string { return v.MissingFrom(jsonBytes) }

// MissingFrom returns the bytes of set that no token of v is alone.
func (v *Vocab) MissingFrom(set string) string {
	var have [256]bool
	for _, b := range v.bytes {
		if len(b) == 1 {
			have[b[0]] = true
		}
	}
	var out []byte
	for i := 0; i < len(set); i++ {
		if c := set[i]; !have[c] && !bytes.ContainsRune(out, rune(c)) {
			out = append(out, c)
		}
	}
	return string(out)
}
