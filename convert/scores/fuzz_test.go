package scores

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzRead feeds arbitrary bytes to the score-file reader (a safetensors
// file with sinf's metadata) and, when they read, ranks, overlaps and
// merges the file. Nothing may panic or hang.
func FuzzRead(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.scores")
	rng := rand.New(rand.NewPCG(1, 2))
	merged, err := Merge([]*File{rawFile(rng, "a", "a", 2, 8, 10, 2, 1), rawFile(rng, "b", "b", 2, 8, 10, 2, 1)}, []string{"a", "b"})
	if err != nil {
		f.Fatal(err)
	}
	for _, sf := range []*File{rawFile(rng, "squad", "squad_v2", 2, 16, 100, 20, 1), merged} {
		if err := Write(seed, sf); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("SINF\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// A hang is a crash the fuzzer records, with its input.
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("FuzzRead: input of %d bytes ran past 10 s", len(data))) })
		defer watchdog.Stop()
		sf, err := readBytes("fuzz.scores", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for l := 0; l < sf.Layers(); l++ {
			_ = sf.Ranking(l)
		}
		_ = TopSet(sf, 0.5)
		_, _, _ = Overlap(sf, sf, 0.3)
		_ = sf.Tasks()
		_ = sf.ContentDigest()
		_, _ = Merge([]*File{sf}, []string{"in"})
	})
}
