package main

import (
	"fmt"
	"os/exec"
)

// startBusy starts n processes that each spin one CPU (a plain shell busy
// loop, `while :; do :; done`), the competing load of `sinf bench --busy`,
// and returns a function that kills them. They run as separate processes, as
// a camera pipeline or another test binary would, so they compete for CPUs
// through the operating system's scheduler, not Go's.
func startBusy(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
	for range n {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		c.SysProcAttr = busyAttr()
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("--busy: start a busy loop: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}
