package constrain

// MaxWhitespace is the most whitespace bytes accepted in a row (so a model
// cannot spin on newlines), and MaxNumberBytes the longest number.
const (
	MaxWhitespace  = 24
	MaxNumberBytes = 24
)

// frame kinds
const (
	fRoot    uint8 = iota // bottom: st 0 before the root value, 1 after it
	fValue                // a value of node expected (whitespace first)
	fObject               // inside an object of node
	fArray                // inside an array of node
	fString               // inside a string (a value, or an object's free key)
	fNumber               // inside a number
	fLiteral              // matching one of a set of literals (enum, true, false, null, a key)
	fExact                // the text before the root value (lits[0]), then the root value of node
)

// object sub-states
const (
	objStart      uint8 = iota // after '{'
	objNeedKey                 // after ','
	objAfterKey                // after the key: ':' expected
	objAfterValue              // after a member: ',' or '}'
)

// array sub-states
const (
	arrStart     uint8 = iota // after '['
	arrAfterItem              // after an item: ',' or ']'
)

// string sub-states (with pos: the \u hex digits or UTF-8 continuation
// bytes still to come)
const (
	strPlain uint8 = iota
	strEscape
	strHex
	strUTF8
)

// literal sources
var (
	litTrue  = [][]byte{[]byte("true")}
	litFalse = [][]byte{[]byte("false")}
	litNull  = [][]byte{[]byte("null")}
	litBools = [][]byte{[]byte("true"), []byte("false")}
)

// frame is one level of the automaton's stack.
type frame struct {
	node *Node
	lits [][]byte // fLiteral: the literals; a key: the object's property names
	mask uint64   // fLiteral: literals still matching; fObject: properties seen
	pos  uint16   // fLiteral: bytes matched; fNumber: bytes; fArray: items; fObject: current property; fString: bytes pending
	kind uint8
	st   uint8
	ws   uint8 // whitespace bytes in a row; fNumber: exponent digits
	flag uint8 // fString: 1 for an object key; fNumber: 1 for integer only; fLiteral: 1 for a key
}

// link is a frame below the top, in a persistent stack.
type link struct {
	f    frame
	next *link
}

// state is the automaton: the top frame and the frames below it. States
// share their lower frames, so copying one is cheap.
type state struct {
	top   frame
	below *link
}

// arena hands out links for the states of one Mask walk; nil: the heap.
type arena struct {
	chunks [][]link
	n      int
}

func (a *arena) new(l link) *link {
	if a == nil {
		p := new(link)
		*p = l
		return p
	}
	c, i := a.n/1024, a.n%1024
	if c == len(a.chunks) {
		a.chunks = append(a.chunks, make([]link, 1024))
	}
	a.n++
	p := &a.chunks[c][i]
	*p = l
	return p
}

func (a *arena) reset() {
	if a != nil {
		a.n = 0
	}
}

// newState starts a document: prefix, the root value, suffix (the texts
// exactly, no whitespace around them when given).
func newState(root *Node, prefix, suffix []byte) state {
	s := state{top: frame{kind: fRoot}}
	if len(suffix) > 0 {
		s.top.lits = [][]byte{suffix}
	}
	if len(prefix) > 0 {
		s.push(nil, frame{kind: fExact, node: root, lits: [][]byte{prefix}})
	} else {
		s.push(nil, frame{kind: fValue, node: root})
	}
	return s
}

func (s *state) push(a *arena, f frame) {
	s.below = a.new(link{f: s.top, next: s.below})
	s.top = f
}

func (s *state) pop() {
	s.top = s.below.f
	s.below = s.below.next
}

// done reports whether the root value is complete: after it, or at the end
// of a root number or literal that could still go on.
func (s *state) done() bool {
	switch {
	case s.top.kind == fRoot:
		return s.top.st == 1 && (s.top.lits == nil || int(s.top.pos) == len(s.top.lits[0]))
	case s.below == nil || s.below.f.kind != fRoot || s.below.f.lits != nil:
		return false
	case s.top.kind == fNumber:
		st := s.top.st
		return st == numZero || st == numInt || st == numFrac || st == numExp
	case s.top.kind == fLiteral && s.top.flag == 0:
		for i, l := range s.top.lits {
			if s.top.mask&(1<<i) != 0 && len(l) == int(s.top.pos) {
				return true
			}
		}
	}
	return false
}

func isWS(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// ws consumes a whitespace byte in a state that allows it.
func (s *state) ws() bool {
	if s.top.ws >= MaxWhitespace {
		return false
	}
	s.top.ws++
	return true
}

// valueDone pops the finished value and tells its container.
func (s *state) valueDone() {
	s.pop()
	switch s.top.kind {
	case fRoot:
		s.top.st = 1
	case fObject:
		s.top.st = objAfterValue
	case fArray:
		s.top.st = arrAfterItem
		s.top.pos++
	}
	s.top.ws = 0
}

// step advances s by byte b; false: no document continues this way (s is
// then garbage).
func (s *state) step(a *arena, b byte) bool {
	for {
		f := &s.top
		switch f.kind {
		case fRoot:
			if f.st == 1 && f.lits != nil { // the suffix
				if int(f.pos) < len(f.lits[0]) && f.lits[0][f.pos] == b {
					f.pos++
					return true
				}
				return false
			}
			return f.st == 1 && isWS(b) && s.ws()
		case fExact:
			if f.lits[0][f.pos] != b {
				return false
			}
			if f.pos++; int(f.pos) == len(f.lits[0]) {
				s.top = frame{kind: fValue, node: f.node}
			}
			return true
		case fValue:
			if isWS(b) {
				return s.ws()
			}
			return s.startValue(a, b)
		case fObject:
			return s.objectByte(a, b)
		case fArray:
			return s.arrayByte(a, b)
		case fString:
			return s.stringByte(b)
		case fNumber:
			ok, refeed := s.numberByte(b)
			if !refeed {
				return ok
			}
			s.valueDone()
		case fLiteral:
			ok, refeed := s.literalByte(a, b)
			if !refeed {
				return ok
			}
		}
	}
}

// startValue replaces the fValue top with the frame of the value b opens.
func (s *state) startValue(a *arena, b byte) bool {
	n := s.top.node
	kinds := kAny
	if n != nil {
		kinds = n.kinds
		if n.enum != nil {
			return s.startLiteral(n.enum, 0, b)
		}
	}
	switch {
	case b == '{' && kinds&kObject != 0:
		s.top = frame{kind: fObject, node: n, st: objStart}
	case b == '[' && kinds&kArray != 0:
		s.top = frame{kind: fArray, node: n, st: arrStart}
	case b == '"' && kinds&kString != 0:
		s.top = frame{kind: fString, node: n}
	case (b == '-' || (b >= '0' && b <= '9')) && kinds&(kNumber|kInteger) != 0:
		f := frame{kind: fNumber, node: n, pos: 1}
		if kinds&kNumber == 0 {
			f.flag = 1
		}
		switch {
		case b == '-':
			f.st = numMinus
		case b == '0':
			f.st = numZero
		default:
			f.st = numInt
		}
		s.top = f
	case b == 't' && kinds&kBoolean != 0:
		return s.startLiteral(litTrue, 0, b)
	case b == 'f' && kinds&kBoolean != 0:
		return s.startLiteral(litFalse, 0, b)
	case b == 'n' && kinds&kNull != 0:
		return s.startLiteral(litNull, 0, b)
	default:
		return false
	}
	return true
}

// startLiteral makes the top a literal frame over lits (those not in skip)
// and feeds it b.
func (s *state) startLiteral(lits [][]byte, skip uint64, b byte) bool {
	var mask uint64
	for i, l := range lits {
		if skip&(1<<i) == 0 && len(l) > 0 && l[0] == b {
			mask |= 1 << i
		}
	}
	if mask == 0 {
		return false
	}
	s.top = frame{kind: fLiteral, node: s.top.node, lits: lits, mask: mask, pos: 1}
	return true
}

// literalByte: ok is whether b continues a literal; refeed, that the
// literal was complete and b belongs to the container (the value is popped).
func (s *state) literalByte(a *arena, b byte) (ok, refeed bool) {
	f := &s.top
	if f.flag == 1 { // an object key: its closing quote ends it
		if b == '"' {
			for i, l := range f.lits {
				if f.mask&(1<<i) != 0 && len(l) == int(f.pos) {
					s.pop()
					s.top.st, s.top.pos, s.top.ws = objAfterKey, uint16(i), 0
					s.top.mask |= 1 << i
					return true, false
				}
			}
			return false, false
		}
	}
	var next uint64
	complete := false
	for i, l := range f.lits {
		if f.mask&(1<<i) == 0 {
			continue
		}
		if int(f.pos) < len(l) && l[f.pos] == b {
			next |= 1 << i
		} else if int(f.pos) == len(l) {
			complete = true
		}
	}
	if next != 0 {
		f.mask, f.pos = next, f.pos+1
		return true, false
	}
	if complete && f.flag == 0 {
		s.valueDone()
		return false, true
	}
	return false, false
}

func (s *state) objectByte(a *arena, b byte) bool {
	f := &s.top
	n := f.node
	switch f.st {
	case objStart, objNeedKey, objAfterValue:
		if isWS(b) {
			return s.ws()
		}
		if f.st == objAfterValue {
			switch b {
			case ',':
				if n != nil && len(n.props) > 0 && f.mask == 1<<len(n.props)-1 {
					return false // every property is there
				}
				f.st, f.ws = objNeedKey, 0
				return true
			case '}':
				return s.closeObject()
			}
			return false
		}
		if b == '}' && f.st == objStart {
			return s.closeObject()
		}
		if b != '"' {
			return false
		}
		f.ws = 0
		if n == nil || len(n.props) == 0 {
			s.push(a, frame{kind: fString, flag: 1})
			return true
		}
		names := n.names
		var mask uint64
		for i := range names {
			if f.mask&(1<<i) == 0 {
				mask |= 1 << i
			}
		}
		if mask == 0 {
			return false
		}
		s.push(a, frame{kind: fLiteral, lits: names, mask: mask, flag: 1})
		return true
	case objAfterKey:
		if isWS(b) {
			return s.ws()
		}
		if b != ':' {
			return false
		}
		var child *Node
		if n != nil && len(n.props) > 0 {
			child = n.props[f.pos].node
		}
		f.ws = 0
		s.push(a, frame{kind: fValue, node: child})
		return true
	}
	return false
}

func (s *state) closeObject() bool {
	f := &s.top
	if n := f.node; n != nil && f.mask&n.required != n.required {
		return false
	}
	s.valueDone()
	return true
}

func (s *state) arrayByte(a *arena, b byte) bool {
	f := &s.top
	n := f.node
	minItems, maxItems := 0, -1
	var items *Node
	if n != nil {
		minItems, maxItems, items = n.minItems, n.maxItems, n.items
	}
	if isWS(b) {
		return s.ws()
	}
	switch {
	case b == ']':
		if int(f.pos) < minItems {
			return false
		}
		s.valueDone()
		return true
	case f.st == arrAfterItem:
		if b != ',' || (maxItems >= 0 && int(f.pos) >= maxItems) {
			return false
		}
		f.st, f.ws = arrStart, 0
		s.push(a, frame{kind: fValue, node: items})
		// after ',' a value must come: an fValue frame, whose ']' is refused
		return true
	}
	// arrStart: the first item begins with b
	if maxItems == 0 {
		return false
	}
	f.ws = 0
	s.push(a, frame{kind: fValue, node: items})
	return s.startValue(a, b)
}

func (s *state) stringByte(b byte) bool {
	f := &s.top
	switch f.st {
	case strPlain:
		switch {
		case b == '"':
			if f.flag == 1 { // a free key
				s.pop()
				s.top.st, s.top.ws = objAfterKey, 0
				return true
			}
			s.valueDone()
			return true
		case b == '\\':
			f.st = strEscape
		case b < 0x20:
			return false
		case b < 0x80:
		case b >= 0xC2 && b <= 0xDF:
			f.st, f.pos = strUTF8, 1
		case b >= 0xE0 && b <= 0xEF:
			f.st, f.pos = strUTF8, 2
		case b >= 0xF0 && b <= 0xF4:
			f.st, f.pos = strUTF8, 3
		default:
			return false
		}
		return true
	case strEscape:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.st = strPlain
		case 'u':
			f.st, f.pos = strHex, 4
		default:
			return false
		}
		return true
	case strHex:
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F') {
			return false
		}
		if f.pos--; f.pos == 0 {
			f.st = strPlain
		}
		return true
	case strUTF8:
		// continuation bytes (overlong and surrogate forms are not told
		// apart: Go's decoder turns them into U+FFFD, still valid JSON)
		if b < 0x80 || b > 0xBF {
			return false
		}
		if f.pos--; f.pos == 0 {
			f.st = strPlain
		}
		return true
	}
	return false
}

// number sub-states
const (
	numMinus uint8 = iota // after '-': a digit
	numZero               // a leading 0 (complete)
	numInt                // integer digits (complete)
	numDot                // after '.': a digit
	numFrac               // fraction digits (complete)
	numE                  // after 'e': a sign or digit
	numESign              // after the exponent's sign: a digit
	numExp                // exponent digits (complete)
)

// numberByte: ok is whether b continues the number; refeed, that the number
// was complete and b belongs to the container.
func (s *state) numberByte(b byte) (ok, refeed bool) {
	f := &s.top
	digit := b >= '0' && b <= '9'
	complete := f.st == numZero || f.st == numInt || f.st == numFrac || f.st == numExp
	if f.pos >= MaxNumberBytes && complete {
		return false, true // long enough: only an end
	}
	next := f.st
	switch f.st {
	case numMinus:
		switch {
		case b == '0':
			next = numZero
		case digit:
			next = numInt
		default:
			return false, false
		}
	case numZero, numInt:
		switch {
		case digit && f.st == numInt:
		case b == '.' && f.flag == 0:
			next = numDot
		case (b == 'e' || b == 'E') && f.flag == 0:
			next = numE
		default:
			return false, true
		}
	case numDot, numFrac:
		switch {
		case digit:
			next = numFrac
		case f.st == numFrac && (b == 'e' || b == 'E'):
			next = numE
		case f.st == numFrac:
			return false, true
		default:
			return false, false
		}
	case numE:
		switch {
		case b == '+' || b == '-':
			next = numESign
		case digit:
			next = numExp
			f.ws = 1
		default:
			return false, false
		}
	case numESign, numExp:
		switch {
		case digit && f.ws < 2: // at most e±99, within a double's range
			next = numExp
			f.ws++
		case f.st == numExp:
			return false, true
		default:
			return false, false
		}
	}
	if f.pos >= MaxNumberBytes && !(next == numFrac || next == numInt || next == numExp) {
		return false, false // past the bound only a digit that completes it
	}
	f.st, f.pos = next, f.pos+1
	return true, false
}
