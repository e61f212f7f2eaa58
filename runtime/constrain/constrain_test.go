package constrain_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime/constrain"
)

// A toy vocabulary: ids 0–255 are the single bytes, then multi-byte tokens
// that cross structure (a quote and a colon, a closing brace and a comma),
// then one special token (no bytes), the end-of-sequence id.
var multi = []string{`{"`, `":`, `", "`, `"}`, `}`, `},`, `true`, `false`, `null`, ` "`, "\n  ", "\n", `12`, `.5`, `e+`, `"name`,
	`Hello`, "é", `\n`, `\u00e9`, `[1`, `, `, `]}`, `0`, `-`, `":"`, `"red"`, `"blue"`, `ab`, `,"`, `"`, `":[`, `":{"`, `":true`, `1,`, `"]`}

func toyVocab() (*constrain.Vocab, int) {
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, m := range multi {
		toks = append(toks, []byte(m))
	}
	eos := len(toks)
	toks = append(toks, nil)
	return constrain.NewVocab(len(toks), func(id int) []byte { return toks[id] }), eos
}

const personSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "height": {"type": "number"},
    "color": {"enum": ["red", "blue", 3, null]},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    "address": {
      "type": "object",
      "properties": {"city": {"type": "string"}, "zip": {"type": ["string", "null"]}},
      "required": ["city", "zip"],
      "additionalProperties": false
    },
    "ok": {"type": "boolean"},
    "any": {}
  },
  "required": ["name", "age", "tags", "address"],
  "additionalProperties": false
}`

func compile(t *testing.T, schema string) *constrain.Node {
	t.Helper()
	n, err := constrain.Compile("schema", json.RawMessage(schema))
	require.NoError(t, err)
	return n
}

func validator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", doc))
	s, err := c.Compile("schema.json")
	require.NoError(t, err)
	return s
}

// feed steps m over s one byte token at a time; false at the first byte
// refused.
func feed(m *constrain.Matcher, s string) bool {
	for i := 0; i < len(s); i++ {
		if !m.Allowed(int(s[i])) {
			return false
		}
		m.Accept(int(s[i]))
	}
	return true
}

// TestAcceptsValid: documents that validate are accepted byte by byte and
// complete; the end-of-sequence id is allowed at the end and only there.
func TestAcceptsValid(t *testing.T) {
	v, eos := toyVocab()
	node := compile(t, personSchema)
	for _, doc := range []string{
		`{"name":"Ann","age":31,"tags":["a"],"address":{"city":"Oslo","zip":null}}`,
		`{"address": {"zip": "0150", "city": "Oslo"}, "tags": ["x", "y", "z"], "age": -0, "name": "\"Q\" \u00e9\\n é😀"}`,
		"{\n  \"name\": \"B\",\n  \"age\": 7,\n  \"height\": -1.5e+3,\n  \"color\": 3,\n  \"tags\": [\"t\"],\n  \"address\": {\"city\": \"\", \"zip\": null},\n  \"ok\": false,\n  \"any\": [{\"k\": [null, true, 0.25]}, \"s\", 12]\n}",
		`{"name":"C","age":0,"color":"blue","tags":[""],"address":{"city":"x","zip":"y"},"height":10,"any":{}}`,
		`{"name":"C","age":0,"color":null,"tags":[""],"address":{"city":"x","zip":"y"}}  `,
	} {
		require.NoError(t, validator(t, personSchema).Validate(mustParse(t, doc)), doc)
		m := constrain.NewMatcher(node, v, []int{eos})
		for i := 0; i < len(doc); i++ {
			require.Equal(t, i >= len(strings.TrimRight(doc, " ")), m.Allowed(eos), "%s: end allowed after %q", doc, doc[:i])
			require.True(t, m.Allowed(int(doc[i])), "%s: refused %q after %q", doc, doc[i], doc[:i])
			m.Accept(int(doc[i]))
		}
		require.True(t, m.Done(), doc)
		require.True(t, m.Allowed(eos), doc)
	}
}

func mustParse(t *testing.T, doc string) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	require.NoError(t, err, doc)
	return v
}

// TestRefusesInvalid: each document is refused at the byte that makes it
// invalid (the prefix before it is accepted).
func TestRefusesInvalid(t *testing.T) {
	v, eos := toyVocab()
	node := compile(t, personSchema)
	base := `{"name":"A","age":1,"tags":["a"],"address":{"city":"c","zip":null}`
	for _, c := range []struct{ ok, bad string }{
		{`{"name":"A"`, `,}`},                    // trailing comma
		{`{"name"`, ` 1`},                        // no colon
		{`{"name":"A","age":0`, `1`},             // leading zero
		{`{"name":"A","age":1`, `.5`},            // an integer
		{`{"name":"A","age":1,"height":1`, `.e`}, // a digit after '.'
		{`{"name":"`, "\x01"},                    // control byte in a string
		{`{"name":"\`, `q`},                      // bad escape
		{`{"name":"\u12`, `g`},                   // bad hex
		{`{"name":"`, "\xff"},                    // not UTF-8
		{"{\"name\":\"\xc3", `a`},                // broken UTF-8
		{`{"`, `nope`},                           // not a property
		{`{"name":"A",`, `"name"`},               // a property twice
		{`{"name":"A"`, `}`},                     // required missing
		{`{"name":"A","color":`, `"green"`},      // not in the enum
		{`{"name":"A","color":`, `4`},            // not in the enum
		{`{"name":"A","tags":[`, `]`},            // minItems 1
		{`{"name":"A","tags":["a","b","c"`, `,`}, // maxItems 3
		{`{"name":"A","tags":["a",`, `]`},        // a trailing comma in an array
		{`{"name":"A","address":{"city":"c","zip":`, `1`},
		{`{"name":`, `1`},
		{`{"name":"A","ok":`, `nul`},
		{base, `,`},       // a comma, then no member: checked below
		{base + `}`, `x`}, // after the document: nothing
		{base + `}` + strings.Repeat(" ", constrain.MaxWhitespace), ` `}, // whitespace bound
	} {
		m := constrain.NewMatcher(node, v, []int{eos})
		require.True(t, feed(m, c.ok), "prefix %q refused", c.ok)
		if c.ok == base && c.bad == "," {
			require.True(t, feed(m, c.bad), "a comma before an unseen property")
			require.False(t, feed(m, `}`), "no member after the comma")
			continue
		}
		require.False(t, feed(m, c.bad), "%q accepted after %q", c.bad, c.ok)
	}
	// json_object: the root is an object
	m := constrain.NewMatcher(constrain.JSONObject(), v, []int{eos})
	require.False(t, feed(m, `[`))
	m = constrain.NewMatcher(constrain.JSONObject(), v, []int{eos})
	require.True(t, feed(m, `{"a":[1,{"b":null}],"c":"d"}`))
	require.True(t, m.Done())
}

// TestCompileRefuses: keywords sinf does not enforce are errors naming their
// path, not silently ignored.
func TestCompileRefuses(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}`: `schema.properties.a: keyword "pattern" is not supported`,
		`{"anyOf":[{"type":"string"}]}`:                                        `schema: keyword "anyOf" is not supported`,
		`{"type":"object","additionalProperties":true}`:                        "schema.additionalProperties: only false is supported",
		`{"type":"strange"}`:                                                   `schema.type: unknown type "strange"`,
		`{"type":"object","properties":{"a":{}},"required":["b"]}`:             `schema.required: "b" is not in properties`,
		`{"type":"array","minItems":3,"maxItems":2}`:                           "minItems 3 above maxItems 2",
		`[1]`:                            "schema: want a schema object",
		`null`:                           "schema: want a schema object",
		`{"type":"string","enum":[1,2]}`: `schema.enum: 1 is not of the schema's type "string", so no value satisfies it`,
		`{"type":"string","const":5}`:    `schema.const: 5 is not of the schema's type "string"`,
		`{"type":["integer","null"],"enum":[null,1.5]}`: `schema.enum: 1.5 is not of the schema's type ["integer","null"]`,
		`{"type":"array","minItems":1000000000000000}`:  "schema.minItems: 1000000000000000, at most 4096",
	} {
		_, err := constrain.Compile("schema", json.RawMessage(schema))
		require.ErrorContains(t, err, want, schema)
	}
}

// TestRandomDocumentsValidate: walks that pick uniformly among the tokens the
// mask allows (the toy vocabulary, so that tokens cross structure) never reach
// a state with nothing allowed, Mask agrees with Allowed on every token at
// every step, and every document finished parses and validates against the
// schema (santhosh-tekuri/jsonschema).
func TestRandomDocumentsValidate(t *testing.T) {
	v, eos := toyVocab()
	for _, schema := range []string{personSchema, `{"type":"object"}`, `true`, `{"type":["integer","null"],"enum":[null,2,3.0]}`,
		`{"type":"object","properties":{"xs":{"type":"array","items":{"type":"array","items":{"type":"number"},"maxItems":2}},"e":{"const":{"k":[1,"two"]}}},"required":["xs","e"]}`} {
		node := compile(t, schema)
		val := validator(t, schema)
		allowed := make([]bool, eos+1)
		finished := 0
		for seed := range 60 {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			m := constrain.NewMatcher(node, v, []int{eos})
			var doc bytes.Buffer
			done := false
			for step := 0; step < 3000 && !done; step++ {
				clear(allowed)
				n := m.Mask(allowed)
				var ids []int
				for id, ok := range allowed {
					if ok {
						ids = append(ids, id)
					}
					if step%7 == 0 && m.Allowed(id) != ok {
						t.Fatalf("seed %d after %q: token %q: Mask says %v, Allowed the opposite", seed, doc.String(), multiOrByte(id), ok)
					}
				}
				require.Equal(t, len(ids), n)
				require.NotEmpty(t, ids, "dead end after %q", doc.String())
				// lean towards closing, so that walks end
				id := ids[rng.IntN(len(ids))]
				if rng.IntN(3) == 0 {
					for _, c := range ids {
						if c == eos || strings.ContainsAny(multiOrByte(c), `}]"`) {
							id = c
							break
						}
					}
				}
				if id == eos {
					done = true
					break
				}
				m.Accept(id)
				doc.WriteString(multiOrByte(id))
			}
			if !done {
				continue
			}
			finished++
			var x any
			require.NoError(t, json.Unmarshal(doc.Bytes(), &x), "%q", doc.String())
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc.Bytes()))
			require.NoError(t, err)
			require.NoError(t, val.Validate(inst), "%s", doc.String())
		}
		require.Greater(t, finished, 30, "walks that finished of 60 (%s)", schema)
	}
}

func multiOrByte(id int) string {
	if id < 256 {
		return string([]byte{byte(id)})
	}
	if id-256 < len(multi) {
		return multi[id-256]
	}
	return ""
}

// TestAround: a document between fixed texts (a Hermes tool call) is
// accepted exactly so, built from Object and Enum; the end comes only
// after the suffix.
func TestAround(t *testing.T) {
	v, eos := toyVocab()
	args := compile(t, `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)
	call := constrain.Object([]string{"name", "arguments"}, []*constrain.Node{constrain.Enum("get_weather", "get_time"), args})
	good := "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
	m := constrain.NewMatcherAround("<tool_call>\n", call, "\n</tool_call>", v, []int{eos})
	for i := 0; i < len(good); i++ {
		require.False(t, m.Allowed(eos), "end after %q", good[:i])
		require.True(t, m.Allowed(int(good[i])), "refused %q after %q", good[i], good[:i])
		m.Accept(int(good[i]))
	}
	require.True(t, m.Allowed(eos))
	for _, c := range []struct{ ok, bad string }{
		{"", "{"},
		{"<tool_call>", "{"},
		{"<tool_call>\n{\"name\": \"", "get_w"[:4] + "x"},
		{"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"O\"}}", " "},
		{"<tool_call>\n{\"arguments\": {\"city\": \"O\"}", "}"},
	} {
		m := constrain.NewMatcherAround("<tool_call>\n", call, "\n</tool_call>", v, []int{eos})
		require.True(t, feed(m, c.ok), "prefix %q", c.ok)
		require.False(t, feed(m, c.bad), "%q after %q", c.bad, c.ok)
	}
}
