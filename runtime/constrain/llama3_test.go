package constrain_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime/constrain"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

var (
	llamaOnce  sync.Once
	llamaTok   *tokenizer.Tokenizer
	llamaVocab *constrain.Vocab
)

// llama3 returns the Llama-3 tokenizer (128,256 ids) and its trie.
func llama3(t testing.TB) (*tokenizer.Tokenizer, *constrain.Vocab) {
	t.Helper()
	dir := sharedtest.Path(t, "tokenizers", "llama3")
	llamaOnce.Do(func() {
		tk, err := tokenizer.Load(dir)
		require.NoError(t, err)
		llamaTok, llamaVocab = tk, constrain.NewVocab(tk.VocabSize(), tk.TokenBytes)
	})
	return llamaTok, llamaVocab
}

// prefixes are documents cut where a decode step may stand: in an object
// before a key, inside a string value, before a value of any JSON, after a
// number in an array.
var prefixes = map[string]string{
	"key":    `{"name": "Ann", `,
	"string": `{"name": "An`,
	"value":  `{"any": `,
	"number": `{"name": "A", "age": 3, "tags": ["x"], "address": {"city": "c", "zip": null}, "any": [12`,
}

// TestLlama3MaskMatchesAllowed: on the real vocabulary, in each of the
// prefixes' states, Mask allows exactly the tokens Allowed accepts, and a
// few obvious ones.
func TestLlama3MaskMatchesAllowed(t *testing.T) {
	tk, v := llama3(t)
	eos := tk.EOS()
	node := compile(t, personSchema)
	allowed := make([]bool, tk.VocabSize())
	for name, p := range prefixes {
		m := constrain.NewMatcher(node, v, eos)
		for _, id := range tk.Encode(p, false) {
			require.True(t, m.Allowed(id), "%s: %q", name, tk.TokenBytes(id))
			m.Accept(id)
		}
		clear(allowed)
		n := m.Mask(allowed)
		count := 0
		for id, ok := range allowed {
			if m.Allowed(id) != ok {
				t.Fatalf("%s: token %d %q: Mask says %v, Allowed the opposite", name, id, tk.TokenBytes(id), ok)
			}
			if ok {
				count++
			}
		}
		require.Equal(t, count, n, name)
		t.Logf("%s: %d of %d tokens allowed", name, n, len(allowed))
	}
}

// TestLlama3RandomDocuments: random walks over the real vocabulary's mask
// end in documents that parse and validate.
func TestLlama3RandomDocuments(t *testing.T) {
	tk, v := llama3(t)
	eos := tk.EOS()
	node := compile(t, personSchema)
	val := validator(t, personSchema)
	allowed := make([]bool, tk.VocabSize())
	toks := make([][]byte, tk.VocabSize())
	closes := make([]bool, tk.VocabSize())
	for id := range toks {
		toks[id] = tk.TokenBytes(id)
		closes[id] = toks[id] == nil || strings.ContainsAny(string(toks[id]), `}]"`)
	}
	finished := 0
	for seed := range 8 {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		m := constrain.NewMatcher(node, v, eos)
		var doc []byte
		for step := 0; step < 400; step++ {
			clear(allowed)
			require.NotZero(t, m.Mask(allowed), "dead end after %q", doc)
			var ids, closing []int
			for id, ok := range allowed {
				if ok {
					ids = append(ids, id)
					if closes[id] {
						closing = append(closing, id)
					}
				}
			}
			id := ids[rng.IntN(len(ids))]
			if len(closing) > 0 && rng.IntN(2) == 0 {
				id = closing[rng.IntN(len(closing))]
			}
			if toks[id] == nil { // end of sequence
				var x any
				require.NoError(t, json.Unmarshal(doc, &x), "%q", doc)
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(doc)))
				require.NoError(t, err)
				require.NoError(t, val.Validate(inst), "%s", doc)
				finished++
				break
			}
			m.Accept(id)
			doc = append(doc, toks[id]...)
		}
	}
	require.Greater(t, finished, 3, "walks that finished of 8")
}

// BenchmarkMaskLlama3 is the cost of one Mask over the 128,256 ids of the
// Llama-3 vocabulary, per state.
func BenchmarkMaskLlama3(b *testing.B) {
	tk, v := llama3(b)
	node, err := constrain.Compile("schema", json.RawMessage(personSchema))
	require.NoError(b, err)
	allowed := make([]bool, tk.VocabSize())
	for _, name := range []string{"key", "string", "value", "number"} {
		b.Run(name, func(b *testing.B) {
			m := constrain.NewMatcher(node, v, tk.EOS())
			for _, id := range tk.Encode(prefixes[name], false) {
				m.Accept(id)
			}
			for b.Loop() {
				clear(allowed)
				m.Mask(allowed)
			}
		})
	}
}
