package metrics

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNormalizeAnswer(t *testing.T) {
	cases := []struct{ in, want string }{
		{"The Quick, brown fox!", "quick brown fox"},
		{"an apple a day", "apple day"},
		// Articles only as whole words: "another", "theme", "a1" stay.
		{"another theme a1", "another theme a1"},
		// Punctuation is removed before the articles: "the-end" → "theend".
		{"the-end", "theend"},
		// ASCII punctuation only; "_" is punctuation too.
		{"«Paris» snake_case", "«paris» snakecase"},
		{"  10th   and 11th\tcenturies ", "10th and 11th centuries"},
		{"The.", ""},
		// German: ß and umlauts are letters; "a" between them is a word.
		{"Größe a Äpfel", "größe äpfel"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, NormalizeAnswer(c.in), "input %q", c.in)
	}
}

func TestExactMatch(t *testing.T) {
	assert.Equal(t, 1.0, ExactMatch("the Denmark, Iceland and Norway.", []string{"Denmark, Iceland and Norway"}))
	assert.Equal(t, 0.0, ExactMatch("Denmark", []string{"Denmark, Iceland and Norway"}))
	// Max over references.
	assert.Equal(t, 1.0, ExactMatch("in the 10th and 11th centuries", []string{"10th and 11th centuries", "in the 10th and 11th centuries"}))
}

func TestF1(t *testing.T) {
	// pred "the cat sat" → [cat sat]; gold "a cat sat down" → [cat sat down]
	// common 2: P = 2/2, R = 2/3, F1 = 2·1·(2/3)/(1 + 2/3) = (4/3)/(5/3) = 0.8
	assert.InDelta(t, 0.8, F1("the cat sat", []string{"a cat sat down"}), eps)
	// Repeated tokens are matched as a multiset: pred [x x y], gold [x y y]:
	// common {x:1, y:1} = 2, P = R = 2/3, F1 = 2/3.
	assert.InDelta(t, 2.0/3, F1("x x y", []string{"x y y"}), eps)
	// No common token → 0.
	assert.Equal(t, 0.0, F1("dog", []string{"cat"}))
	// Max over references: 0.8 vs 1.
	assert.Equal(t, 1.0, F1("cat sat", []string{"a cat sat down", "The cat sat."}))
	// A non-empty reference and an empty prediction → 0.
	assert.Equal(t, 0.0, F1("", []string{"France"}))
}

func TestUnanswerable(t *testing.T) {
	// No reference (SQuAD v2 is_impossible): the only gold answer is "".
	for _, refs := range [][]string{nil, {}, {""}, {"the", " . "}} {
		assert.Equal(t, 1.0, ExactMatch("", refs), "refs %q", refs)
		assert.Equal(t, 1.0, F1("", refs), "refs %q", refs)
		// A prediction that normalises to empty counts as abstaining.
		assert.Equal(t, 1.0, ExactMatch("The.", refs), "refs %q", refs)
		assert.Equal(t, 1.0, F1(" a ", refs), "refs %q", refs)
		assert.Equal(t, 0.0, ExactMatch("Normandy", refs), "refs %q", refs)
		assert.Equal(t, 0.0, F1("Normandy", refs), "refs %q", refs)
	}
	// References that normalise to "" are dropped when others remain.
	assert.Equal(t, 0.0, ExactMatch("", []string{"the", "France"}))
	assert.Equal(t, 1.0, ExactMatch("france", []string{"the", "France"}))
}
