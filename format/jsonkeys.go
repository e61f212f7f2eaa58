package format

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// repeatedKey returns the path (such as "config.num_hidden_layers") of the
// first key that repeats within one object of the JSON value data, or ""
// when none does; spec §4: keys MUST NOT repeat within an object, and
// encoding/json would silently keep the last. The values of the top-level
// keys in shallow (the embedded tokenizer files, megabytes of vocabulary
// that their own loader reads) are checked at their own top level only.
func repeatedKey(data []byte, shallow map[string]bool) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	return walkKeys(dec, "", 0, shallow)
}

// walkKeys reads one JSON value from dec, checking its objects' keys; depth
// 0 is the metadata object itself.
func walkKeys(dec *json.Decoder, path string, depth int, shallow map[string]bool) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return "", nil
	}
	if d == '[' {
		for i := 0; dec.More(); i++ {
			if p, err := walkKeys(dec, fmt.Sprintf("%s[%d]", path, i), depth+1, shallow); p != "" || err != nil {
				return p, err
			}
		}
		_, err := dec.Token()
		return "", err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		k, _ := tok.(string)
		kp := k
		if path != "" {
			kp = path + "." + k
		}
		if seen[k] {
			return kp, nil
		}
		seen[k] = true
		if depth == 1 && shallow[path] {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", err
			}
			continue
		}
		if p, err := walkKeys(dec, kp, depth+1, shallow); p != "" || err != nil {
			return p, err
		}
	}
	_, err = dec.Token()
	return "", err
}
