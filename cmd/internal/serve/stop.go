package serve

import "strings"

// stopMatcher holds back generated text that could be the start of a stop
// string, so that a stop string split across tokens is found and never
// emitted (OpenAI's stop: the returned text ends before it).
type stopMatcher struct {
	stops   []string
	pending string // generated, not yet emitted
	matched bool
}

// add appends a decoded piece and returns the text that is now safe to emit.
// Once a stop string has matched, it returns the text before it and then
// nothing.
func (m *stopMatcher) add(piece string) string {
	if m.matched {
		return ""
	}
	m.pending += piece
	if len(m.stops) == 0 {
		out := m.pending
		m.pending = ""
		return out
	}
	first := -1
	for _, s := range m.stops {
		if i := strings.Index(m.pending, s); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		out := m.pending[:first]
		m.pending, m.matched = "", true
		return out
	}
	hold := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(m.pending)); n > hold; n-- {
			if strings.HasSuffix(m.pending, s[:n]) {
				hold = n
				break
			}
		}
	}
	out := m.pending[:len(m.pending)-hold]
	m.pending = m.pending[len(m.pending)-hold:]
	return out
}

// flush returns the held-back text at the end of a generation that no stop
// string completed.
func (m *stopMatcher) flush(rest string) string {
	out := m.add(rest)
	if m.matched {
		return out
	}
	out += m.pending
	m.pending = ""
	return out
}
