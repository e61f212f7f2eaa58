package sthead_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/sthead"
	"github.com/selectinfer/sinf/internal/sharedtest"
)

// safetensorsBytes frames a raw JSON header and data as a safetensors file.
func safetensorsBytes(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), data...)
}

// TestCheck feeds each malformed safetensors framing or header of
// issue 16 (items 1, 5, 11, 12) and asserts the exact error.
func TestCheck(t *testing.T) {
	w := `{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	w2 := `{"dtype":"F32","shape":[2],"data_offsets":[8,16]}`
	eight := make([]byte, 8)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty metadata", safetensorsBytes(`{"__metadata__":{}}`, nil),
			"m.safetensors: holds no tensors (its header lists only __metadata__)"},
		{"empty object", safetensorsBytes(`{}`, nil), "m.safetensors: holds no tensors (its header lists only nothing)"},
		{"null metadata", safetensorsBytes(`{"__metadata__":null}`, nil),
			"m.safetensors: holds no tensors (its header lists only __metadata__)"},
		{"literal duplicate", safetensorsBytes(`{"w":`+w+`,"w":`+w+`}`, eight),
			`m.safetensors: header: tensor "w" is listed twice (a name must be unique; which entry holds the weights is ambiguous)`},
		{"duplicate that tiles", safetensorsBytes(`{"w":`+w+`,"v":`+w2+`,"w":`+w2+`}`, make([]byte, 16)),
			`m.safetensors: header: tensor "w" is listed twice (a name must be unique; which entry holds the weights is ambiguous)`},
		{"invalid UTF-8 name", safetensorsBytes("{\"w\xff\":"+w+"}", eight),
			`m.safetensors: header: tensor name "w\xff" is not valid UTF-8`},
		{"zip", append([]byte("PK\x03\x04\x14\x00\x00\x00"), make([]byte, 64)...),
			"m.safetensors: not a safetensors file (looks like a PyTorch/ZIP checkpoint; convert it to safetensors first, for example with transformers' save_pretrained(safe_serialization=True))"},
		{"pickle", append([]byte{0x80, 0x02, 0x8a, 0x0a}, make([]byte, 64)...),
			"m.safetensors: not a safetensors file (looks like a Python pickle, a legacy PyTorch checkpoint; convert it to safetensors first)"},
		{"sinf", append([]byte("SINF\x01\x00\x00\x00"), make([]byte, 64)...),
			"m.safetensors: not a safetensors file (looks like a .sinf file: run it with sinf run or sinf-run)"},
		// 85966670672 is what a ZIP's first 8 bytes read as (the case).
		{"absurd length", append(binary.LittleEndian.AppendUint64(nil, 1<<40), []byte("garbage!")...),
			"m.safetensors: not a safetensors file: its first 8 bytes give a header of 1099511627776 bytes (at most 100000000), and the file holds 16"},
		{"truncated in the header", safetensorsBytes(`{"w":`+w+`}`, eight)[:20],
			"m.safetensors: truncated: the header is 54 bytes, the file ends 12 bytes after the length"},
		{"truncated in the data", safetensorsBytes(`{"w":`+w+`}`, eight)[:8+54+5],
			`m.safetensors: header: truncated: tensor "w"'s data ends at byte 8 of the data section, which holds 5 bytes`},
		{"tiny", []byte{1, 2, 3}, "m.safetensors: truncated: 3 bytes, a safetensors file needs at least 8"},
		{"not an object", safetensorsBytes(`[1,2]`, nil), "m.safetensors: not a safetensors file: the header does not start with a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.EqualError(t, sthead.Check("m.safetensors", c.file), c.want)
		})
	}
	require.NoError(t, sthead.Check("m.safetensors", safetensorsBytes(`{"__metadata__":{"format":"pt"},"w":`+w+`}`, eight)))
	// A header of 640 bytes starts the file with 0x80 0x02, as a pickle
	// does: the framing decides, not the first bytes.
	h640 := `{"w":` + w + `,"__metadata__":{"pad":"` + strings.Repeat("x", 640-len(`{"w":`+w+`,"__metadata__":{"pad":""}}`)) + `"}}`
	require.Len(t, h640, 640)
	require.NoError(t, sthead.Check("m.safetensors", safetensorsBytes(h640, eight)))
}

// TestOpenRefusesEmptyCheckpoint: sinf convert on a checkpoint with no
// tensors panicked in convert.Convert (issue 16 item 1); the reader now
// refuses it, naming the file.
func TestOpenRefusesEmptyCheckpoint(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "tokenizer.json"} {
		b, err := os.ReadFile(sharedtest.Path(t, "models", "stories260k", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	p := filepath.Join(dir, "model.safetensors")
	require.NoError(t, os.WriteFile(p, safetensorsBytes(`{"__metadata__":{}}`, nil), 0o644))
	_, err := hf.Open(dir)
	require.EqualError(t, err, p+": holds no tensors (its header lists only __metadata__)")
}
