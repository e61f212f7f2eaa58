package runcmd

import "os"

// SetInterrupt replaces the Ctrl-C hook of runs: notify receives the
// channel a run listens on. It returns the function that restores it.
func SetInterrupt(notify func(c chan<- os.Signal)) (restore func()) {
	saved := notifyInterrupt
	notifyInterrupt = notify
	return func() { notifyInterrupt = saved }
}
