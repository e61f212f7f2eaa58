package metrics

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func assertScore(t *testing.T, want, got Score, msg string) {
	t.Helper()
	assert.InDelta(t, want.P, got.P, eps, msg+" P")
	assert.InDelta(t, want.R, got.R, eps, msg+" R")
	assert.InDelta(t, want.F, got.F, eps, msg+" F")
}

func TestRougeTokenize(t *testing.T) {
	assert.Equal(t, []string{"the", "u", "s", "gdp", "grew", "3", "5"}, RougeTokenize("The U.S. GDP grew 3.5%!"))
	// Non-ASCII letters are not in [a-z0-9]: "Größe" → "gr", "e".
	assert.Equal(t, []string{"gr", "e"}, RougeTokenize("Größe"))
	assert.Empty(t, RougeTokenize(" -- "))
}

func TestRougeHandExample(t *testing.T) {
	// ref  = the cat sat on the mat      (6 tokens)
	// pred = the cat lay on the red mat  (7 tokens)
	s := Rouge("the cat lay on the red mat", "the cat sat on the mat")
	// ROUGE-1: overlap the (min 2,2) + cat + on + mat = 5; sat, lay, red
	// unmatched. P = 5/7, R = 5/6, F = 2·(5/7)(5/6)/((5/7)+(5/6))
	// = (50/42)/(65/42) = 10/13.
	assertScore(t, Score{5.0 / 7, 5.0 / 6, 10.0 / 13}, s.R1, "rouge1")
	// ROUGE-2: ref bigrams {the cat, cat sat, sat on, on the, the mat} (5),
	// pred bigrams {the cat, cat lay, lay on, on the, the red, red mat} (6);
	// overlap {the cat, on the} = 2. P = 2/6, R = 2/5,
	// F = 2·(1/3)(2/5)/((1/3)+(2/5)) = (4/15)/(11/15) = 4/11.
	assertScore(t, Score{2.0 / 6, 2.0 / 5, 4.0 / 11}, s.R2, "rouge2")
	// ROUGE-L: LCS table over ref × pred gives "the cat on the mat" = 5
	// (sat/lay and red break nothing else). P = 5/7, R = 5/6, F = 10/13.
	assertScore(t, Score{5.0 / 7, 5.0 / 6, 10.0 / 13}, s.RL, "rougeL")
}

func TestRougeLCSOrder(t *testing.T) {
	// ROUGE-L differs from ROUGE-1 when order differs:
	// ref = a b c d, pred = d c b a: unigram overlap 4 (R1 = 1) but the LCS
	// is a single token: P = R = F = 1/4.
	s := Rouge("d c b a", "a b c d")
	assertScore(t, Score{1, 1, 1}, s.R1, "rouge1")
	assertScore(t, Score{0.25, 0.25, 0.25}, s.RL, "rougeL")
	// ref = a b c d e, pred = a c e b: LCS "a c e" = 3: P = 3/4, R = 3/5,
	// F = 2·(3/4)(3/5)/((3/4)+(3/5)) = (9/10)/(27/20) = 2/3.
	s = Rouge("a c e b", "a b c d e")
	assertScore(t, Score{0.75, 0.6, 2.0 / 3}, s.RL, "rougeL")
	assert.Equal(t, 3, lcsLen([]string{"a", "b", "c", "d", "e"}, []string{"a", "c", "e", "b"}))
}

func TestRougeOneWordReference(t *testing.T) {
	// ref "Paris" → [paris]; pred "It is Paris." → [it is paris].
	s := Rouge("It is Paris.", "Paris")
	// ROUGE-1: overlap 1, P = 1/3, R = 1/1, F = 2·(1/3)/(4/3) = 1/2.
	assertScore(t, Score{1.0 / 3, 1, 0.5}, s.R1, "rouge1")
	// ROUGE-2: the reference has no bigram: overlap 0 → P = 0/2, R = 0/max(0,1)
	// = 0, F = 0.
	assertScore(t, Score{}, s.R2, "rouge2")
	// ROUGE-L: LCS 1, same as ROUGE-1.
	assertScore(t, Score{1.0 / 3, 1, 0.5}, s.RL, "rougeL")
}

func TestRougeEmptyPrediction(t *testing.T) {
	s := Rouge("", "the cat sat")
	assert.Equal(t, RougeScores{}, s)
	// Punctuation only is empty after tokenization too.
	assert.Equal(t, RougeScores{}, Rouge("...", "the cat sat"))
	assert.Equal(t, RougeScores{}, Rouge("the cat", ""))
}

func TestRougeMaxAndCorpus(t *testing.T) {
	// Against "the cat sat on the mat" R1 F = 10/13; against "a dog" 0.
	s := RougeMax("the cat lay on the red mat", []string{"a dog", "the cat sat on the mat"})
	assert.InDelta(t, 10.0/13, s.R1.F, eps)
	assert.InDelta(t, 4.0/11, s.R2.F, eps)
	assert.Equal(t, RougeScores{}, RougeMax("x", nil))

	// Corpus: mean of per-example scores: (10/13 + 1) / 2 for ROUGE-1 F.
	c := RougeCorpus([]string{"the cat lay on the red mat", "same words"},
		[]string{"the cat sat on the mat", "Same words."})
	assert.InDelta(t, (10.0/13+1)/2, c.R1.F, eps)
	assert.InDelta(t, (4.0/11+1)/2, c.R2.F, eps)
	assert.InDelta(t, (5.0/7+1)/2, c.RL.P, eps)
	assert.Equal(t, RougeScores{}, RougeCorpus(nil, nil))
}

func TestPerplexity(t *testing.T) {
	// exp(mean(1, 2, 3)) = exp(2)
	assert.InDelta(t, math.Exp(2), Perplexity([]float64{1, 2, 3}), eps)
	// Uniform over 4 tokens: NLL ln 4 each → perplexity 4.
	assert.InDelta(t, 4, Perplexity([]float64{math.Log(4), math.Log(4)}), eps)
	assert.True(t, math.IsNaN(Perplexity(nil)))
}
