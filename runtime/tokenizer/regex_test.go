package tokenizer

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// splitTokenizer is a minimal BPE tokenizer.json whose pre-tokenizer is a
// Split on the given regex (JSON-escaped).
func splitTokenizer(regex string) []byte {
	return []byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "` + regex + `"}, "behavior": "Isolated", "invert": false},
		"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "x": 2, "y": 3}, "merges": []}}`)
}

// TestCatastrophicRegexRefused (issue 16 item 2): a Split or Replace regex
// that backtracks exponentially, such as (a+)+$ (26 × a + b ran past 20 s),
// is refused when the file is read, naming the file, the field and the
// pattern.
func TestCatastrophicRegexRefused(t *testing.T) {
	start := time.Now()
	_, err := New("m", splitTokenizer(`(a+)+$`), nil)
	require.EqualError(t, err, `tokenizer m: tokenizer.json: pre_tokenizer.pattern.Regex: pattern "(a+)+$" backtracks catastrophically: matching "aaaaaaaaaaaaaaaaaaaaaaaaaaaa!" ran past 100ms (it would hang encoding); refused`)
	require.Less(t, time.Since(start), 5*time.Second)

	_, err = New("m", []byte(`{"normalizer": {"type": "Replace", "pattern": {"Regex": "(\\s+)+$"}, "content": " "},
		"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`), nil)
	require.EqualError(t, err, `tokenizer m: tokenizer.json: normalizer.pattern.Regex: pattern "(\\s+)+$" backtracks catastrophically: matching "                            !" ran past 100ms (it would hang encoding); refused`)

	// The shared tokenizers' own patterns pass the probes (TestGoldenEncode
	// loads them); so does a plain one.
	_, err = New("m", splitTokenizer(`\\s+|\\w+`), nil)
	require.NoError(t, err)
}

// TestRegexTimeBound: a pattern the probes miss still runs with a time
// bound per search; the encoding stops with an error naming the file, the
// field and the pattern instead of hanging (regexTimeout is lowered for the
// test).
func TestRegexTimeBound(t *testing.T) {
	defer func(d time.Duration) { regexTimeout = d }(regexTimeout)
	regexTimeout = 200 * time.Millisecond
	tk, err := New("m", splitTokenizer(`(x+x+)+y`), nil) // exponential on x…x, which no probe holds
	require.NoError(t, err)
	ids, err := tk.EncodeChecked("xy", false)
	require.NoError(t, err)
	require.Equal(t, []int{2, 3}, ids)
	start := time.Now()
	ids, err = tk.EncodeChecked(strings.Repeat("x", 40), false)
	require.EqualError(t, err, `tokenizer m: tokenizer.json: pre_tokenizer.pattern.Regex: pattern "(x+x+)+y" ran past its time bound of 200ms on a piece of 40 bytes; the text is not encoded`)
	require.Nil(t, ids)
	require.Nil(t, tk.Encode(strings.Repeat("x", 40), false))
	require.Less(t, time.Since(start), 5*time.Second)
}
