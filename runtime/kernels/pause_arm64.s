//go:build !purego

#include "textflag.h"

// func cpuPause()
TEXT ·cpuPause(SB), NOSPLIT, $0-0
	YIELD
	RET
