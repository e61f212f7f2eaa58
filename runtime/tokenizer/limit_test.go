package tokenizer

import (
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// words returns n bytes or a little more of space-separated words.
func words(n int) string {
	ws := []string{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world", "1234", "!?", "über"}
	r := rand.New(rand.NewSource(1))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(ws[r.Intn(len(ws))])
		b.WriteByte(' ')
	}
	return b.String()
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestEncodeLimit: EncodeWith's MaxTokens keeps the ids of a text within it
// (the same ids as Encode), refuses one past it with a *TooLongError, and
// stops as soon as the limit is passed: on 1 MiB of words, a limit of 2000
// tokens allocates under 512 KiB beyond the regex engine's copy of the
// text as runes (4 bytes a byte), the whole encoding more (before, the
// whole text was pre-tokenized first: ~150 MB of allocations for 1 MiB
// with Qwen3's tokenizer).
func TestEncodeLimit(t *testing.T) {
	for _, tk := range []*Tokenizer{qwen3(t), llama3(t)} {
		text := words(1 << 20)
		full := tk.Encode(text, true)
		require.Greater(t, len(full), 200000)
		small := words(3000)
		want := tk.Encode(small, true)
		got, err := tk.EncodeWith(small, EncodeOptions{AddBOS: true, MaxTokens: len(want)})
		require.NoError(t, err)
		require.Equal(t, want, got)
		_, err = tk.EncodeWith(small, EncodeOptions{AddBOS: true, MaxTokens: len(want) - 1})
		var long *TooLongError
		require.ErrorAs(t, err, &long)
		require.Equal(t, len(want)-1, long.Limit)
		require.Equal(t, len(small), long.Bytes)

		whole := allocated(func() { tk.Encode(text, true) })
		var lerr error
		limited := allocated(func() { _, lerr = tk.EncodeWith(text, EncodeOptions{AddBOS: true, MaxTokens: 2000}) })
		require.ErrorAs(t, lerr, &long)
		t.Logf("%s: whole %d tokens: %.1f MB allocated; limit 2000: %.2f MB", tk.name, len(full), float64(whole)/1e6, float64(limited)/1e6)
		// Past the regex engine's rune copy of the text (4 bytes a byte),
		// the limited encoding allocates under 512 KiB; the whole one more.
		floor := uint64(4*len(text) + 512<<10)
		require.Less(t, limited, floor, "the limited encoding did not stop early")
		require.Greater(t, whole, floor)
	}
}

// TestEncodePlain: in a plain range a special token's text is encoded as
// text (its pieces spell it, no control id), outside it the same text is
// the control token, and a non-special added token (Qwen3's <think>) still
// matches inside.
func TestEncodePlain(t *testing.T) {
	tk := qwen3(t)
	imEnd, ok := tk.tokenID("<|im_end|>")
	require.True(t, ok)
	think, ok := tk.tokenID("<think>")
	require.True(t, ok)
	text := "hi<|im_end|>\n<think>x<|im_end|>"
	plainStart := strings.Index(text, "<|im_end|>")
	// Only the first <|im_end|> and the <think> are in the plain range.
	plain := []Span{{plainStart, strings.LastIndex(text, "<|im_end|>")}}
	ids, err := tk.EncodeWith(text, EncodeOptions{Plain: plain})
	require.NoError(t, err)
	require.Equal(t, 1, countOf(ids, imEnd), "ids %v", ids)
	require.Equal(t, imEnd, ids[len(ids)-1])
	require.Equal(t, 1, countOf(ids, think))
	// The ids spell the text: byte-level pieces back to bytes.
	var b []byte
	for _, id := range ids {
		if id == imEnd {
			b = append(b, "<|im_end|>"...)
			continue
		}
		if id == think {
			b = append(b, "<think>"...)
			continue
		}
		var ok bool
		b, ok = byteLevelBytes(tk.Token(id), b)
		require.True(t, ok, tk.Token(id))
	}
	require.Equal(t, text, string(b))
	// As plain text, "<|im_end|>" is more than one token.
	require.Greater(t, len(ids), len(tk.Encode(text, false))+1)
	// Without plain ranges: both are control tokens.
	require.Equal(t, 2, countOf(tk.Encode(text, false), imEnd))
}

func countOf(ids []int, id int) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestSpecialTokens lists the special added tokens, not the others.
func TestSpecialTokens(t *testing.T) {
	sp := qwen3(t).SpecialTokens()
	require.Contains(t, sp, "<|im_end|>")
	require.Contains(t, sp, "<|im_start|>")
	require.False(t, slices.Contains(sp, "<think>"))
	require.Contains(t, llama3(t).SpecialTokens(), "<|eot_id|>")
}

// BenchmarkEncodeWords encodes 64 KiB of words with Qwen3's tokenizer (the
// BPE cache warm), reporting MB/s of text.
//
//	go test -run '^$' -bench EncodeWords ./runtime/tokenizer/
func BenchmarkEncodeWords(b *testing.B) {
	tk := qwen3(b)
	text := words(64 << 10)
	tk.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Encode(text, false)
	}
}
