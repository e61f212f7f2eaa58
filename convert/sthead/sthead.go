// Package sthead checks the framing and the JSON header of a safetensors
// file before github.com/nlpodyssey/safetensors reads it, for what that
// library reports badly or not at all. The HF checkpoint reader and the
// score-file reader use it.
package sthead

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/selectinfer/sinf/format"
)

// maxHeaderBytes is the largest safetensors JSON header read, the limit of
// the safetensors reference implementation (safetensors/src/tensor.rs
// MAX_HEADER_SIZE, 100 MB).
const maxHeaderBytes = 100_000_000

// Check checks the framing and the JSON header of the safetensors
// file data (the whole file: an 8-byte little-endian header length, the
// header, the tensor data) before the safetensors library reads it, for what
// that library reports badly or not at all (github.com/nlpodyssey/safetensors
// decodes the header into a map, so a repeated name keeps its last entry).
// Errors, each naming path:
//
//   - a file of another format: a ZIP (PyTorch .bin/.pt), a pickle, GGUF,
//     or a .sinf file, named as such;
//   - "truncated": the file ends inside the header or inside a tensor's
//     data, with both sizes;
//   - a tensor name that is not valid UTF-8, or that repeats (a pass over
//     the header's JSON tokens, so the raw bytes are what is checked);
//   - a header that names no tensor.
func Check(path string, data []byte) error {
	if len(data) < 8 {
		return fmt.Errorf("%s: truncated: %d bytes, a safetensors file needs at least 8", path, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	rest := uint64(len(data) - 8)
	// Another format is named only where the bytes are no safetensors
	// framing: a real header length can begin with a pickle's 0x80 0x02.
	if n > rest || n < 2 || data[8] != '{' {
		if kind := sniff(data); kind != "" {
			return fmt.Errorf("%s: not a safetensors file (looks like %s)", path, kind)
		}
	}
	switch {
	case n > maxHeaderBytes && (n > rest || data[8] != '{'):
		return fmt.Errorf("%s: not a safetensors file: its first 8 bytes give a header of %d bytes (at most %d), and the file holds %d", path, n, uint64(maxHeaderBytes), len(data))
	case n > maxHeaderBytes:
		return fmt.Errorf("%s: header of %d bytes is over the limit of %d", path, n, uint64(maxHeaderBytes))
	case n > rest:
		return fmt.Errorf("%s: truncated: the header is %d bytes, the file ends %d bytes after the length", path, n, rest)
	case n < 2 || data[8] != '{':
		return fmt.Errorf("%s: not a safetensors file: the header does not start with a JSON object", path)
	}
	header := data[8 : 8+n]
	dataBytes := rest - n
	tensors, err := scanHeader(header, dataBytes)
	if err != nil {
		return fmt.Errorf("%s: header: %w", path, err)
	}
	if tensors == 0 {
		return fmt.Errorf("%s: holds no tensors (its header lists only %s)", path, describeEmpty(header))
	}
	return nil
}

// sniff names the format of a file that is not safetensors, from its first
// bytes, or returns "".
func sniff(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("PK\x03\x04")):
		return "a PyTorch/ZIP checkpoint; convert it to safetensors first, for example with transformers' save_pretrained(safe_serialization=True)"
	case b[0] == 0x80 && b[1] >= 2 && b[1] <= 5:
		return "a Python pickle, a legacy PyTorch checkpoint; convert it to safetensors first"
	case bytes.HasPrefix(b, []byte("GGUF")):
		return "a GGUF file (llama.cpp)"
	case bytes.HasPrefix(b, []byte(format.Magic)):
		return "a .sinf file: run it with sinf run or sinf-run"
	}
	return ""
}

// tensorEntry is the part of a header entry CheckHeader checks.
type tensorEntry struct {
	DataOffsets []uint64 `json:"data_offsets"`
}

// scanHeader walks the header's top-level object token by token and returns
// the number of tensors in it; dataBytes is the size of the data section.
func scanHeader(header []byte, dataBytes uint64) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(header))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	tensors := 0
	for dec.More() {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return 0, err
		}
		name, ok := tok.(string)
		if !ok {
			return 0, fmt.Errorf("offset %d: want a tensor name", before)
		}
		if raw := header[before:dec.InputOffset()]; !utf8.Valid(raw) {
			return 0, fmt.Errorf("tensor name %s is not valid UTF-8", quoteRaw(raw))
		}
		if seen[name] {
			return 0, fmt.Errorf("tensor %q is listed twice (a name must be unique; which entry holds the weights is ambiguous)", name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, fmt.Errorf("entry %q: %w", name, err)
		}
		if name == "__metadata__" {
			continue
		}
		tensors++
		var e tensorEntry
		if err := json.Unmarshal(v, &e); err == nil && len(e.DataOffsets) == 2 && e.DataOffsets[1] > dataBytes && e.DataOffsets[0] <= e.DataOffsets[1] {
			return 0, fmt.Errorf("truncated: tensor %q's data ends at byte %d of the data section, which holds %d bytes", name, e.DataOffsets[1], dataBytes)
		}
	}
	if _, err := dec.Token(); err != nil {
		return 0, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, errors.New("data after the JSON object")
	}
	return tensors, nil
}

// quoteRaw quotes the raw JSON string token of a name (with the separator
// before it trimmed) Go-style, so an invalid byte shows as \xff.
func quoteRaw(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n,")
	raw = bytes.TrimSuffix(bytes.TrimPrefix(raw, []byte(`"`)), []byte(`"`))
	return fmt.Sprintf("%+q", raw)
}

func describeEmpty(header []byte) string {
	if bytes.Contains(header, []byte(`"__metadata__"`)) {
		return "__metadata__"
	}
	return "nothing"
}
