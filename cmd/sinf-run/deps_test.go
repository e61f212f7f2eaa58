package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoConverter: the device binary depends on format, runtime and the
// tokenizer only, never on the converter or its libraries.
func TestLinksNoConverter(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	var own []string
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/selectinfer/sinf/convert") || strings.Contains(d, "safetensors") ||
			strings.Contains(d, "progressbar") || strings.Contains(d, "gonum") {
			t.Errorf("sinf-run links %s", d)
		}
		if strings.HasPrefix(d, "github.com/selectinfer/sinf/") {
			own = append(own, d)
		}
	}
	if len(own) == 0 {
		t.Fatal("go list found none of the project's packages")
	}
	t.Logf("project packages linked: %v", own)
}
