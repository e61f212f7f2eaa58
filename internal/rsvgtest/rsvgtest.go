// Package rsvgtest renders SVG figures to PNG with rsvg-convert (Debian's
// librsvg2-bin), as a reader's viewer would, and checks the picture: tests
// of the plotting code use it, and keep the PNGs to look at. It is imported
// by tests only.
package rsvgtest

import (
	"image"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Render converts the SVG file svg to svg's name with .png and returns the
// decoded picture; ok is false (and the test logs why) when rsvg-convert is
// not installed. A file rsvg-convert refuses fails the test.
func Render(t testing.TB, svg string) (img image.Image, ok bool) {
	t.Helper()
	exe, err := exec.LookPath("rsvg-convert")
	if err != nil {
		t.Logf("rsvg-convert not installed (apt-get install librsvg2-bin): %s not rendered", svg)
		return nil, false
	}
	out := strings.TrimSuffix(svg, ".svg") + ".png"
	if b, err := exec.Command(exe, "-o", out, svg).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert %s: %v: %s", svg, err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err = png.Decode(f); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return img, true
}

// Blank reports whether every pixel of r (within img) is white or
// transparent: nothing is drawn there.
func Blank(img image.Image, r image.Rectangle) bool {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			if ca > 0x0800 && (cr < 0xf000 || cg < 0xf000 || cb < 0xf000) {
				return false
			}
		}
	}
	return true
}

// Hues counts the distinct chromatic colours in r (within img), 8 bits a
// channel, channels at least 48 apart: a colour bar or a heat map has many;
// text, axes and grids (greys, however antialiased) have none.
func Hues(img image.Image, r image.Rectangle) int {
	r = r.Intersect(img.Bounds())
	seen := map[[3]uint32]bool{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			c := [3]uint32{cr >> 8, cg >> 8, cb >> 8}
			if max(c[0], c[1], c[2])-min(c[0], c[1], c[2]) >= 48 {
				seen[c] = true
			}
		}
	}
	return len(seen)
}

// Dir is where a test writes figures to look at: $SINF_FIGURES when set
// (created), else a temporary folder.
func Dir(t testing.TB) string {
	if d := os.Getenv("SINF_FIGURES"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}
