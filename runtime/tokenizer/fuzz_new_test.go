package tokenizer

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/selectinfer/sinf/internal/sharedtest"
)

// FuzzNew feeds arbitrary bytes to the tokenizer.json loader (and a few
// tokenizer_config.json forms) and, when they load, encodes and decodes a
// few texts through every path. Nothing may panic or hang (the regex time
// bounds are lowered so that a slow pattern ends quickly), and every id
// Encode returns is one Decode knows.
func FuzzNew(f *testing.F) {
	regexTimeout, probeTimeout = 50*time.Millisecond, 5*time.Millisecond
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`), 0)
	f.Add(splitTokenizer(`\\s+|\\w+`), 1)
	f.Add([]byte(`{"added_tokens": [{"id": 3, "content": "<s>", "special": true}], "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
		"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"},
		"decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
		"model": {"type": "BPE", "byte_fallback": true, "vocab": {"<0x61>": 0, "▁": 1, "a": 2}, "merges": []}}`), 2)
	if b, err := os.ReadFile(sharedtest.Root(f) + "/models/stories260k/tokenizer.json"); err == nil {
		f.Add(b, 0)
	}
	configs := [][]byte{nil, []byte(`{"add_bos_token": true, "bos_token": "<s>", "eos_token": "</s>"}`), []byte(`{"eos_token": {"content": "a"}}`)}
	f.Fuzz(func(t *testing.T, data []byte, cfg int) {
		// A hang is a crash the fuzzer records, with its input.
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("FuzzNew: input of %d bytes ran past 10 s", len(data))) })
		defer watchdog.Stop()
		tk, err := New("fuzz", data, configs[uint(cfg)%uint(len(configs))])
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, s := range []string{"Hello world", "  a\tb\n\nab  ", "日本語🙂 123", "<s>ab</s>", "\xff\xfe", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"} {
			ids, err := tk.EncodeChecked(s, true)
			if err != nil {
				continue // a regex ran past its bound: an error, not a hang
			}
			for _, id := range ids {
				if id < 0 || id >= tk.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d outside [0, %d)", s, id, tk.VocabSize())
				}
				_ = tk.Token(id)
			}
			_ = tk.Decode(ids)
			d := tk.NewDecoder()
			for _, id := range ids {
				_ = d.Add(id)
			}
			_ = d.Flush()
		}
		_ = tk.Decode([]int{-1, 0, 1 << 30})
		_ = tk.EOS()
		_ = tk.BOS()
	})
}
