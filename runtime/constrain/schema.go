// Package constrain is structured output: a JSON document, or one that
// validates against a JSON Schema of OpenAI's strict-mode subset, enforced
// while sampling. A Matcher is a byte-level JSON automaton, specialised by the
// schema, stepped over each candidate token's bytes (tokenizer.TokenBytes);
// Mask walks a trie of the vocabulary so that tokens sharing a prefix share
// its steps and a dead prefix rejects its whole subtree. It implements
// runtime.Constraint.
//
// The automaton accepts exactly the documents it can finish: compact or
// whitespace-separated JSON (at most MaxWhitespace bytes in a row), numbers of
// at most MaxNumberBytes bytes, object keys spelled as the schema spells them
// (no escapes), and strings of valid UTF-8. After the root value only
// whitespace and an end-of-sequence token may follow.
package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Kinds a schema node admits (a bit set: "type": ["string", "null"] is two).
const (
	kString uint8 = 1 << iota
	kNumber
	kInteger
	kBoolean
	kNull
	kObject
	kArray
	kAny = kString | kNumber | kInteger | kBoolean | kNull | kObject | kArray
)

// Node is one compiled schema: the kinds it admits and, for objects, arrays
// and enums, what they hold. A nil *Node is any JSON value.
type Node struct {
	kinds uint8
	// object: the properties in schema order (JSON-encoded names without
	// the quotes), required as a bit set; no properties: any keys, any values.
	props    []prop
	names    [][]byte // the props' names, for the key automaton
	required uint64
	// array: items (nil: any), minItems, maxItems (−1: no bound)
	items              *Node
	minItems, maxItems int
	// enum or const: the values' compact JSON encodings (nil: no enum)
	enum [][]byte
}

type prop struct {
	name []byte // JSON-encoded, without quotes
	node *Node
}

// maxSet is the most properties of one object, or values of one enum (bit sets
// of 64).
const maxSet = 64

// JSONObject returns the node of response_format {"type": "json_object"}: an
// object holding any JSON.
func JSONObject() *Node {
	return &Node{kinds: kObject, maxItems: -1}
}

// Compile compiles a JSON Schema: type (one or a list of string, number,
// integer, boolean, null, object, array), properties, required,
// additionalProperties (false or absent: only the listed properties are
// generated, which validates either way), items, minItems, maxItems, enum and
// const, nested to any depth; title, description, default, $schema, strict and
// examples are annotations and ignored. Other keywords ($ref, anyOf, pattern,
// minimum, ...) are refused, naming their path, rather than not enforced. name
// labels errors ("response_format.json_schema.schema").
//
// The schema true compiles to a node of any JSON value (not nil, which a
// caller may take for no constraint at all); null, an enum or const value
// that the node's type refuses (an unsatisfiable schema), and minItems above
// MaxMinItems are errors.
func Compile(name string, schema json.RawMessage) (*Node, error) {
	n, err := compile(name, schema, 0)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return &Node{kinds: kAny, maxItems: -1}, nil
	}
	return n, nil
}

// MaxMinItems is the largest minItems a schema may ask for: a reply that
// must hold more elements would be cut by max_tokens before it is valid.
const MaxMinItems = 4096

// valueKinds returns the kinds a decoded JSON value (encoding/json's any)
// belongs to: an integral number is a number and an integer.
func valueKinds(x any) uint8 {
	switch v := x.(type) {
	case string:
		return kString
	case float64:
		if v == math.Trunc(v) {
			return kNumber | kInteger
		}
		return kNumber
	case bool:
		return kBoolean
	case nil:
		return kNull
	case map[string]any:
		return kObject
	}
	return kArray
}

var annotations = map[string]bool{"title": true, "description": true, "default": true, "$schema": true, "examples": true, "strict": true, "$id": true, "$comment": true}

func compile(path string, raw json.RawMessage, depth int) (*Node, error) {
	if depth > 64 {
		return nil, fmt.Errorf("%s: nested more than 64 deep", path)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		if t := bytes.TrimSpace(raw); string(t) == "true" {
			return nil, nil // the schema true: anything
		}
		return nil, fmt.Errorf("%s: want a schema object", path)
	}
	n := &Node{maxItems: -1}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch k {
		case "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const":
		default:
			if !annotations[k] {
				return nil, fmt.Errorf("%s: keyword %q is not supported by sinf's structured output (supported: type, properties, required, additionalProperties false, items, minItems, maxItems, enum, const)", path, k)
			}
		}
	}
	if t, ok := m["type"]; ok {
		var one string
		var list []string
		if json.Unmarshal(t, &one) == nil {
			list = []string{one}
		} else if json.Unmarshal(t, &list) != nil || len(list) == 0 {
			return nil, fmt.Errorf("%s.type: want a type name or a list of them", path)
		}
		for _, s := range list {
			k, ok := map[string]uint8{"string": kString, "number": kNumber | kInteger, "integer": kInteger, "boolean": kBoolean, "null": kNull, "object": kObject, "array": kArray}[s]
			if !ok {
				return nil, fmt.Errorf("%s.type: unknown type %q", path, s)
			}
			n.kinds |= k
		}
	} else {
		n.kinds = kAny
	}
	for _, k := range []string{"enum", "const"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		var vals []json.RawMessage
		if k == "const" {
			vals = []json.RawMessage{v}
		} else if json.Unmarshal(v, &vals) != nil || len(vals) == 0 {
			return nil, fmt.Errorf("%s.enum: want a non-empty array", path)
		}
		if len(vals) > maxSet {
			return nil, fmt.Errorf("%s.enum: %d values, at most %d", path, len(vals), maxSet)
		}
		for _, v := range vals {
			var x any
			if err := json.Unmarshal(v, &x); err != nil {
				return nil, fmt.Errorf("%s.%s: %v", path, k, err)
			}
			enc, err := compactJSON(x)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %v", path, k, err)
			}
			if valueKinds(x)&n.kinds == 0 {
				return nil, fmt.Errorf("%s.%s: %s is not of the schema's type %s, so no value satisfies it", path, k, enc, bytes.TrimSpace(m["type"]))
			}
			n.enum = append(n.enum, enc)
		}
	}
	if v, ok := m["additionalProperties"]; ok && string(bytes.TrimSpace(v)) != "false" {
		return nil, fmt.Errorf("%s.additionalProperties: only false is supported (the listed properties are the ones generated)", path)
	}
	if v, ok := m["properties"]; ok {
		var props map[string]json.RawMessage
		if err := json.Unmarshal(v, &props); err != nil {
			return nil, fmt.Errorf("%s.properties: want an object of schemas", path)
		}
		// schema order, as written
		order, err := objectKeys(v)
		if err != nil {
			return nil, fmt.Errorf("%s.properties: %v", path, err)
		}
		if len(order) > maxSet {
			return nil, fmt.Errorf("%s.properties: %d properties, at most %d", path, len(order), maxSet)
		}
		for _, name := range order {
			child, err := compile(path+".properties."+name, props[name], depth+1)
			if err != nil {
				return nil, err
			}
			enc, _ := compactJSON(name)
			n.props = append(n.props, prop{name: enc[1 : len(enc)-1], node: child})
			n.names = append(n.names, enc[1:len(enc)-1])
		}
	}
	if v, ok := m["required"]; ok {
		var req []string
		if err := json.Unmarshal(v, &req); err != nil {
			return nil, fmt.Errorf("%s.required: want a list of property names", path)
		}
		for _, r := range req {
			i := n.propIndex(r)
			if i < 0 {
				return nil, fmt.Errorf("%s.required: %q is not in properties", path, r)
			}
			n.required |= 1 << i
		}
	}
	if v, ok := m["items"]; ok {
		child, err := compile(path+".items", v, depth+1)
		if err != nil {
			return nil, err
		}
		n.items = child
	}
	for _, k := range []string{"minItems", "maxItems"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		var x int
		if err := json.Unmarshal(v, &x); err != nil || x < 0 {
			return nil, fmt.Errorf("%s.%s: want an integer ≥ 0", path, k)
		}
		if k == "minItems" && x > MaxMinItems {
			return nil, fmt.Errorf("%s.minItems: %d, at most %d (a longer array would not fit a reply)", path, x, MaxMinItems)
		}
		if k == "minItems" {
			n.minItems = x
		} else {
			n.maxItems = x
		}
	}
	if n.maxItems >= 0 && n.minItems > n.maxItems {
		return nil, fmt.Errorf("%s: minItems %d above maxItems %d", path, n.minItems, n.maxItems)
	}
	if n.kinds&kObject != 0 && len(n.props) == 0 && m["properties"] != nil {
		return nil, fmt.Errorf("%s.properties: empty; give properties, or none for any object", path)
	}
	return n, nil
}

// Object returns the node of an object with the given properties, all
// required, in that order (a tool call: {"name": ..., "arguments": ...}).
func Object(names []string, nodes []*Node) *Node {
	n := &Node{kinds: kObject, maxItems: -1}
	for i, name := range names {
		enc, _ := compactJSON(name)
		n.props = append(n.props, prop{name: enc[1 : len(enc)-1], node: nodes[i]})
		n.names = append(n.names, enc[1:len(enc)-1])
		n.required |= 1 << i
	}
	return n
}

// Enum returns the node of one of the given strings.
func Enum(values ...string) *Node {
	n := &Node{kinds: kString, maxItems: -1}
	for _, v := range values {
		enc, _ := compactJSON(v)
		n.enum = append(n.enum, enc)
	}
	return n
}

func (n *Node) propIndex(name string) int {
	enc, _ := compactJSON(name)
	enc = enc[1 : len(enc)-1]
	for i, p := range n.props {
		if bytes.Equal(p.name, enc) {
			return i
		}
	}
	return -1
}

// compactJSON encodes v without HTML escaping or whitespace.
func compactJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// objectKeys returns a JSON object's keys in the order written.
func objectKeys(raw json.RawMessage) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := t.(string)
		if !ok {
			return nil, fmt.Errorf("want an object")
		}
		if strings.ContainsAny(k, "\x00") {
			return nil, fmt.Errorf("property %q: NUL in a name", k)
		}
		keys = append(keys, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}
