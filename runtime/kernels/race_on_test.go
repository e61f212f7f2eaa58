//go:build race

package kernels

// raceOn shrinks the numeric sweeps under the race detector, whose job here
// is the pool's synchronization, not the arithmetic.
const raceOn = true
