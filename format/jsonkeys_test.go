package format

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRepeatedMetadataKey (issue 16 item 14): a key repeated within one
// object of the metadata (spec §4: MUST NOT) is refused, naming the file,
// the field and the key's path; encoding/json kept the last, so a repeated
// config made inspect see another model.
func TestRepeatedMetadataKey(t *testing.T) {
	for _, c := range []struct{ from, to, key string }{
		{`"intermediate_size":6`, `"num_hidden_layers":6`, "config.num_hidden_layers"},
		{`"selection":`, `"tokenizer":`, "tokenizer"},
		{`"vocab":{"<s>":0,"a&b":1}`, `"vocab":{"<s>":0,"<s>":1}`, ""}, // inside the tokenizer: its own loader's business
	} {
		b := sampleBytes(t)
		h := decodeHeader(b)
		mb := b[h.MetadataOffset : h.MetadataOffset+h.MetadataLength]
		from := []byte(c.from)
		if c.from == `"vocab":{"<s>":0,"a&b":1}` {
			from = []byte(`"vocab":{"\u003cs\u003e":0,"a\u0026b":1}`)
			if !bytes.Contains(mb, from) {
				from = []byte(c.from)
			}
		}
		require.Equal(t, 1, bytes.Count(mb, from), "%s in %s", from, mb)
		to := []byte(c.to)
		if len(to) != len(from) {
			to = append(to, bytes.Repeat([]byte(" "), len(from)-len(to))...)
		}
		copy(mb[bytes.Index(mb, from):], to)
		fixChecksums(b)
		_, err := NewFile(b, "x.sinf")
		if c.key == "" {
			require.NoError(t, err)
			continue
		}
		fe := requireFormatError(t, err, "metadata")
		require.Equal(t, "key "+c.key+" repeats (spec §4: keys must not repeat within an object)", fe.Msg)
		require.EqualValues(t, h.MetadataOffset, fe.Off)
		require.Equal(t, "x.sinf", fe.Path)
	}
}
