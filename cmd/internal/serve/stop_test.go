package serve

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStopMatcher: text that may start a stop string is held back until it
// cannot, a match across pieces cuts the text before it, and the held text
// comes out at the end when nothing matched.
func TestStopMatcher(t *testing.T) {
	m := &stopMatcher{stops: []string{"o w", "xyz"}}
	require.Equal(t, "Hel", m.add("Hel"))
	require.Equal(t, "l", m.add("lo"))   // "o" may start "o w"
	require.Equal(t, "", m.add(" "))     // "o " too
	require.Equal(t, "", m.add("world")) // "o w" matched: nothing after it
	require.True(t, m.matched)
	require.Equal(t, "", m.flush("!"))

	m = &stopMatcher{stops: []string{"o w"}}
	require.Equal(t, "g", m.add("go"))
	require.Equal(t, "o!", m.flush("!"))
	require.False(t, m.matched)

	// The earliest match wins, whichever stop string it is.
	m = &stopMatcher{stops: []string{"ND!", "END"}}
	require.Equal(t, "xx", m.add("xxEN"))
	require.Equal(t, "", m.add("D!yy"))
	require.True(t, m.matched)
	m = &stopMatcher{}
	require.Equal(t, "anything", m.add("anything"))
}
