package dataset

import (
	"strings"
)

// ptbBrackets maps the Penn Treebank bracket escapes to the brackets.
var ptbBrackets = map[string]string{
	"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
}

// ptbClitics are the clitics PTB tokenisation splits off a word.
var ptbClitics = []string{"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"}

// DetokenizePTB undoes Penn-Treebank-style tokenisation (as in the CNN/DM
// "highlights_tokenized" references). The text is split at single spaces
// into tokens; only standalone tokens are rewritten or joined, so
// untokenised text (such as the CNN/DM articles) passes through nearly
// unchanged:
//
//   - -LRB- -RRB- -LSB- -RSB- -LCB- -RCB- (any case) → ( ) [ ] { };
//   - “ → " and ` → ', joined to the next token; ” → " and a standalone
//     ', joined to the previous token;
//   - the clitics n't 's 're 've 'll 'd 'm (any case) are joined to the
//     previous token ("do n't" → "don't", "Locke 's" → "Locke's");
//   - . , ; : ! ? % ) ] } are joined to the previous token ("charge ." →
//     "charge."), ( [ { to the next one ("-LRB- OM -RRB-" → "(OM)"), and
//     $ £ € to a following token that starts with a digit ("£ 2,100" →
//     "£2,100").
//
// Other spacing (" - ", " -- ", " ... ") is left as it is.
func DetokenizePTB(s string) string {
	toks := strings.Split(s, " ")
	// joinLeft[i]: no space before toks[i]; joinRight[i]: none after it.
	joinLeft := make([]bool, len(toks))
	joinRight := make([]bool, len(toks))
	for i, t := range toks {
		if b, ok := ptbBrackets[strings.ToUpper(t)]; ok {
			t = b
		}
		switch t {
		case "``":
			t, joinRight[i] = `"`, true
		case "`":
			t, joinRight[i] = "'", true
		case "''":
			t, joinLeft[i] = `"`, true
		case "'", ".", ",", ";", ":", "!", "?", "%", ")", "]", "}":
			joinLeft[i] = true
		case "(", "[", "{":
			joinRight[i] = true
		case "$", "£", "€":
			joinRight[i] = i+1 < len(toks) && toks[i+1] != "" && toks[i+1][0] >= '0' && toks[i+1][0] <= '9'
		}
		for _, c := range ptbClitics {
			if strings.EqualFold(t, c) {
				joinLeft[i] = true
			}
		}
		toks[i] = t
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, t := range toks {
		if i > 0 && !joinLeft[i] && !joinRight[i-1] {
			b.WriteByte(' ')
		}
		b.WriteString(t)
	}
	return b.String()
}
