//go:build !linux

package main

import "syscall"

// busyAttr: no parent-death signal outside Linux; startBusy's stop kills them.
func busyAttr() *syscall.SysProcAttr { return nil }
