package main

import "syscall"

// busyAttr makes a busy loop die with sinf (SIGKILL when its parent exits).
func busyAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
