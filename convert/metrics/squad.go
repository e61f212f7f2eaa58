package metrics

import (
	"strings"
	"unicode"
)

// squadPunct is Python's string.punctuation: the ASCII punctuation the
// official SQuAD script removes. Non-ASCII punctuation is kept, as there.
const squadPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// NormalizeAnswer normalises an answer exactly as normalize_answer in the
// official SQuAD v2.0 evaluation script: lower-case, remove ASCII
// punctuation, replace the whole words "a", "an" and "the" by a space (word
// boundaries as Python's Unicode \b), and collapse whitespace to single
// spaces with no leading or trailing space.
func NormalizeAnswer(s string) string {
	s = pyLower(s)
	s = strings.Map(func(r rune) rune {
		if r < 0x80 && strings.ContainsRune(squadPunct, r) {
			return -1
		}
		return r
	}, s)
	s = removeArticles(s)
	return strings.Join(pyFields(s), " ")
}

// isPyWordRune reports whether r is a word character for Python's Unicode
// regular expressions (\w): alphanumeric or underscore.
func isPyWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// removeArticles replaces each whole-word "a", "an" or "the" by one space,
// as re.sub(r'\b(a|an|the)\b', ' ', text) does.
func removeArticles(s string) string {
	rs := []rune(s)
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(rs); {
		// A match must start at a word boundary: the previous rune is not a
		// word rune (the current one, 'a' or 't', is).
		if i == 0 || !isPyWordRune(rs[i-1]) {
			matched := 0
			for _, art := range [...]string{"a", "an", "the"} {
				// Python's alternation tries "a" first; when "a" is not
				// followed by a boundary it backtracks to "an".
				n := len(art)
				if i+n > len(rs) || string(rs[i:i+n]) != art {
					continue
				}
				if i+n == len(rs) || !isPyWordRune(rs[i+n]) {
					matched = n
					break
				}
			}
			if matched > 0 {
				b.WriteByte(' ')
				i += matched
				continue
			}
		}
		b.WriteRune(rs[i])
		i++
	}
	return b.String()
}

// squadTokens is get_tokens of the official script: the whitespace-separated
// tokens of the normalised answer.
func squadTokens(s string) []string {
	return pyFields(NormalizeAnswer(s))
}

// goldAnswers keeps the references whose normalised form is non-empty; when
// none remains the question is unanswerable and, as in the official script,
// the only gold answer is "".
func goldAnswers(refs []string) []string {
	var gold []string
	for _, r := range refs {
		if NormalizeAnswer(r) != "" {
			gold = append(gold, r)
		}
	}
	if len(gold) == 0 {
		gold = []string{""}
	}
	return gold
}

// ExactMatch is the SQuAD v2.0 exact-match score of pred against refs: 1 when
// the normalised prediction equals some normalised reference, else 0.
// References that normalise to "" are dropped; when refs is empty or all of
// them are dropped (an unanswerable question) the score is 1 exactly when the
// normalised prediction is empty.
func ExactMatch(pred string, refs []string) float64 {
	p := NormalizeAnswer(pred)
	for _, g := range goldAnswers(refs) {
		if NormalizeAnswer(g) == p {
			return 1
		}
	}
	return 0
}

// F1 is the SQuAD v2.0 token-level F1 of pred against refs, the maximum over
// the references (dropping those that normalise to "", as ExactMatch does).
// Per reference: with common = the multiset intersection of the normalised
// tokens, F1 = 2PR/(P+R) where P = |common|/|pred tokens| and R =
// |common|/|ref tokens|; when either token list is empty the score is 1 if
// both are empty and 0 otherwise.
func F1(pred string, refs []string) float64 {
	pt := squadTokens(pred)
	best := 0.0
	for _, g := range goldAnswers(refs) {
		if f := tokenF1(pt, squadTokens(g)); f > best {
			best = f
		}
	}
	return best
}

func tokenF1(pred, gold []string) float64 {
	if len(pred) == 0 || len(gold) == 0 {
		if len(pred) == len(gold) {
			return 1
		}
		return 0
	}
	counts := make(map[string]int, len(gold))
	for _, t := range gold {
		counts[t]++
	}
	same := 0
	for _, t := range pred {
		if counts[t] > 0 {
			counts[t]--
			same++
		}
	}
	if same == 0 {
		return 0
	}
	p := float64(same) / float64(len(pred))
	r := float64(same) / float64(len(gold))
	return 2 * p * r / (p + r)
}
