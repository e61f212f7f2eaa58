package metrics

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const eps = 1e-9

func TestTokenize13a(t *testing.T) {
	cases := []struct{ in, want string }{
		// Symbols (here ',' and '!') are split off; the comma is split by
		// the "not preceded by a digit" rule.
		{"Hello, world!", "Hello , world !"},
		// The apostrophe is not in the symbol class: contractions stay whole.
		{"I don't know.", "I don't know ."},
		// A period or comma between digits stays: numbers are kept whole.
		{"pi is 3.14, roughly 1,000/318.", "pi is 3.14 , roughly 1,000 / 318 ."},
		// A dash is split only after a digit: "well-known" stays, a range
		// "1990-2000" is split, "a-1" stays.
		{"well-known 1990-2000 a-1", "well-known 1990 - 2000 a-1"},
		// Currency and brackets are symbols; "approx." loses its period.
		{"$5 (approx.)", "$ 5 ( approx . )"},
		// Abbreviation periods each split: "e." and "g." are separate
		// non-overlapping matches of the "X." rule.
		{"e.g. this", "e . g . this"},
		// Entities are unescaped before splitting; <skipped> is removed.
		{"&quot;Hi&quot; &amp; <skipped>bye", `" Hi " & bye`},
		// A hyphen at a line break joins the word; other newlines are spaces.
		{"inter-\nnational\nnews", "international news"},
		// Whitespace is collapsed and trimmed; empty input gives "".
		{"  a \t b  ", "a b"},
		{"", ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Tokenize13a(c.in), "input %q", c.in)
	}
}

// Papineni et al. (2002), section 2.1, Example 1.
var (
	papCand1 = "It is a guide to action which ensures that the military always obeys the commands of the party"
	papCand2 = "It is to insure the troops forever hearing the activity guidebook that party direct"
	papRefs  = []string{
		"It is a guide to action that ensures that the military will forever heed Party commands",
		"It is the guiding principle which guarantees the military forces always being under the command of the Party",
		"It is the practical guide for the army always to heed the directions of the party",
	}
)

func TestBLEUPapineniModifiedPrecision(t *testing.T) {
	// Candidate 1 has 18 words; every word but "obeys" occurs in some
	// reference often enough ("the" occurs 3 times in the candidate, 4 times
	// in references 2 and 3), so the modified unigram precision is 17/18.
	// (The sentences are given without the final period, as in the paper's
	// counts; 13a would otherwise add a matching "." token.)
	r := CorpusBLEU([]string{papCand1}, [][]string{papRefs})
	assert.Equal(t, 18, r.Totals[0])
	assert.Equal(t, 17, r.Counts[0])
	assert.InDelta(t, 100*17.0/18, r.Precisions[0], eps)
	// Bigrams of candidate 1 (17) found in a reference: "It is", "is a",
	// "a guide", "guide to", "to action", "ensures that", "that the",
	// "the military" (ref 1), "of the" (refs 2, 3), "the party" (ref 3) → 10;
	// "action which", "which ensures", "military always", "always obeys",
	// "obeys the", "the commands", "commands of" are in none. 10/17.
	assert.Equal(t, 17, r.Totals[1])
	assert.Equal(t, 10, r.Counts[1])

	// Candidate 2 has 14 words of which It, is, to, the, the, forever, that,
	// party occur in the references: 8/14.
	r = CorpusBLEU([]string{papCand2}, [][]string{papRefs})
	assert.Equal(t, 14, r.Totals[0])
	assert.Equal(t, 8, r.Counts[0])
	assert.InDelta(t, 100*8.0/14, r.Precisions[0], eps)
}

func TestBLEUPapineniTheThe(t *testing.T) {
	// Papineni et al. (2002) section 2.1 Example 2: "the" 7 times, clipped to
	// its maximum reference count 2 → modified unigram precision 2/7. The
	// paper's example ignores case; sacreBLEU is case-sensitive, so the
	// references are written in lower case here ("The cat ..." would leave
	// only one lower-case "the" per reference).
	hyp := "the the the the the the the"
	refs := []string{"the cat is on the mat", "there is a cat on the mat"}
	r := CorpusBLEU([]string{hyp}, [][]string{refs})
	assert.Equal(t, [4]int{2, 0, 0, 0}, r.Counts)
	assert.Equal(t, [4]int{7, 6, 5, 4}, r.Totals)
	// No bigram, trigram or 4-gram matches: "exp" smoothing gives the k-th
	// zero precision 100/(2^k · total): 100/(2·6), 100/(4·5), 100/(8·4).
	want := [4]float64{100 * 2.0 / 7, 100.0 / 12, 100.0 / 20, 100.0 / 32}
	for i := range want {
		assert.InDelta(t, want[i], r.Precisions[i], eps, "order %d", i+1)
	}
	// Reference lengths 6 and 7, hypothesis 7: closest is 7, BP = 1.
	assert.Equal(t, 7, r.RefLen)
	assert.Equal(t, 1.0, r.BP)
	// BLEU = (28.5714 · 8.3333 · 5 · 3.125)^(1/4) = 3720.238^(1/4) = 7.80985.
	assert.InDelta(t, 7.809849842, r.Score, 1e-8)
}

func TestBLEUHandExample(t *testing.T) {
	// hyp: the cat sat on the mat   ref: the cat sat on a mat
	// 1-grams: the (2, clipped to 1), cat, sat, on, mat → 5/6
	// 2-grams: the cat, cat sat, sat on | on the, the mat → 3/5
	// 3-grams: the cat sat, cat sat on | sat on the, on the mat → 2/4
	// 4-grams: the cat sat on | cat sat on the, sat on the mat → 1/3
	// Equal lengths: BP = 1.
	// BLEU = 100 · (5/6 · 3/5 · 2/4 · 1/3)^(1/4) = 100 · (1/12)^(1/4) = 53.72850
	r := CorpusBLEU([]string{"the cat sat on the mat"}, [][]string{{"the cat sat on a mat"}})
	assert.Equal(t, [4]int{5, 3, 2, 1}, r.Counts)
	assert.Equal(t, [4]int{6, 5, 4, 3}, r.Totals)
	assert.InDelta(t, 100*math.Pow(1.0/12, 0.25), r.Score, eps)
	assert.InDelta(t, 53.7284966, r.Score, 1e-6)
}

func TestBLEUIdenticalNoOverlapEmpty(t *testing.T) {
	s := "The quick brown fox jumps over the lazy dog."
	r := CorpusBLEU([]string{s, "Another sentence, with punctuation!"},
		[][]string{{s}, {"Another sentence, with punctuation!"}})
	assert.InDelta(t, 100, r.Score, eps)
	assert.Equal(t, 1.0, r.BP)

	r = CorpusBLEU([]string{"alpha beta gamma delta"}, [][]string{{"one two three four"}})
	assert.Equal(t, 0.0, r.Score)
	assert.Equal(t, [4]int{0, 0, 0, 0}, r.Counts)

	// Empty hypothesis: no tokens, no matches, BP = 0.
	r = CorpusBLEU([]string{""}, [][]string{{"a reference sentence here"}})
	assert.Equal(t, 0.0, r.Score)
	assert.Equal(t, 0.0, r.BP)
	assert.Equal(t, 0, r.SysLen)
	assert.Equal(t, 4, r.RefLen)

	// Too short for 4-grams anywhere in the corpus: BLEU 0 (sacreBLEU
	// without effective order), though unigrams match.
	r = CorpusBLEU([]string{"a b c"}, [][]string{{"a b c"}})
	assert.Equal(t, 0.0, r.Score)
	assert.Equal(t, 3, r.Counts[0])
}

func TestBLEUBrevityPenalty(t *testing.T) {
	// hyp: 6 tokens, all of whose n-grams occur in the 7-token reference, so
	// every precision is 100; BP = exp(1 - 7/6) = exp(-1/6) = 0.846482.
	r := CorpusBLEU([]string{"the cat sat on the mat"}, [][]string{{"the cat sat on the mat today"}})
	assert.Equal(t, 6, r.SysLen)
	assert.Equal(t, 7, r.RefLen)
	assert.InDelta(t, math.Exp(-1.0/6), r.BP, eps)
	assert.InDelta(t, 84.64817249, r.Score, 1e-7)

	// A longer hypothesis is not penalised by BP (only by precision).
	r = CorpusBLEU([]string{"the cat sat on the mat today"}, [][]string{{"the cat sat on the mat"}})
	assert.Equal(t, 1.0, r.BP)
}

func TestBLEUClosestRefLength(t *testing.T) {
	// Hypothesis of 5 tokens; references of 4 and 6 tokens are equally
	// close: the shorter (4) is used.
	assert.Equal(t, 4, closestRefLen(5, []int{6, 4}))
	assert.Equal(t, 6, closestRefLen(5, []int{6, 9}))
	r := CorpusBLEU([]string{"a b c d e"}, [][]string{{"a b c d e f", "a b c d"}})
	assert.Equal(t, 4, r.RefLen)
	// Empty reference strings are ignored.
	r = CorpusBLEU([]string{"a b c d e"}, [][]string{{"", "a b c d e"}})
	assert.InDelta(t, 100, r.Score, eps)
}

func TestBLEUCorpusSumsStatistics(t *testing.T) {
	// Corpus BLEU sums the statistics of the segments before the geometric
	// mean: (hand example) + (identical 4-token segment).
	r := CorpusBLEU(
		[]string{"the cat sat on the mat", "w x y z"},
		[][]string{{"the cat sat on a mat"}, {"w x y z"}})
	assert.Equal(t, [4]int{9, 6, 4, 2}, r.Counts)
	assert.Equal(t, [4]int{10, 8, 6, 4}, r.Totals)
	// 100 · (9/10 · 6/8 · 4/6 · 2/4)^(1/4) = 100 · 0.225^(1/4)
	assert.InDelta(t, 100*math.Pow(0.225, 0.25), r.Score, eps)
	require.Panics(t, func() { CorpusBLEU([]string{"a"}, nil) })
	assert.Contains(t, r.String(), "BLEU = ")
}
