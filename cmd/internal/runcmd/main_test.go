package runcmd_test

import (
	"testing"

	"github.com/selectinfer/sinf/internal/sharedtest"
)

// TestMain keeps the tests' verify cache (runtime.DefaultVerifyCache) out
// of the user's cache folder.
func TestMain(m *testing.M) { sharedtest.MainWithVerifyCache(m) }
