package runtime

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEstimateMemoryParts: the parts of the memory model on the
// Llama-3.2-1B shape at 2048 positions filled by one prompt, two threads,
// against the formulas of its doc written out by hand.
func TestEstimateMemoryParts(t *testing.T) {
	c := Config{Hidden: 2048, Intermediate: 8192, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, Vocab: 128256, MaxPositions: 131072}
	m := EstimateMemory(c, 2_206_132_997, 6_080_000, 2048, 2048, 2)
	require.Equal(t, int64(2*16*2048*512*4), m.KV) // 128 MiB
	rope := int64(2048 * 64 * 4)
	acts := int64(2048 * (3*2048 + 2*2048 + 2*512 + 2*8192) * 4)
	logits := int64(128256 * 4)
	scratch := int64(2 * 1024 * 256 * 4)   // 8192 rows in 8 chunks, 256 deep
	scratch += 2048 * 256 * (64 + 8 + 128) // x of 8192 as int8 blocks and back, 2048 tokens
	scratch += 2 * (16*2048 + 2048*64) * 4 // blocked attention: 16 tokens' scores, the values as float32
	require.Equal(t, rope+acts+logits+scratch, m.Buffers)
	require.Equal(t, int64(30_400_000), m.TokenizerLive)
	require.Equal(t, int64(72_352_000), m.TokenizerPeak)
	require.Equal(t, m.TokenizerLive+m.KV+m.Buffers, m.Heap) // the buffers outgrow the parse's peak
	require.Equal(t, int64(2_206_132_997)+m.Heap+int64(12*(1<<20)), m.Total())
	require.Equal(t, m.Total(), m.TotalBytes)

	// A short run: the tokenizer's parse is the heap's peak.
	s := EstimateMemory(c, 2_206_132_997, 6_080_000, 64, 8, 2)
	require.Equal(t, s.TokenizerPeak, s.Heap)
	require.Equal(t, KVCacheBytes(c, 64), s.KV)
}
