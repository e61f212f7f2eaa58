//go:build tools

// Package tools pins the module's chosen libraries (DEVELOPERS.md) so that
// `go mod tidy` keeps them while the packages that use them are written.
package tools

import (
	_ "github.com/dlclark/regexp2/v2"
	_ "github.com/nlpodyssey/safetensors"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/stretchr/testify/require"
	_ "github.com/urfave/cli/v2"
	_ "golang.org/x/exp/slices"
	_ "golang.org/x/sys/unix"
	_ "gonum.org/v1/plot"
)
