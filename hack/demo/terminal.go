package main

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// takeTerminal makes the demo the foreground process group of the terminal
// on stdin, so that Ctrl-C reaches the demo alone. Otherwise make gets the
// same SIGINT and reports its own interruption (exit status 130) however
// cleanly the demo stops, and the reader of a pipe (`make demo | tee log`)
// dies before the demo has printed that it cleaned up. The returned function
// hands the terminal back to the group it came from.
//
// Without a terminal, or when the demo runs in the background, it does
// nothing: a signal sent to make's process group then reaches the demo too.
func takeTerminal() (restore func()) {
	const stdin = 0
	noop := func() {}
	original, err := tcgetpgrp(stdin)
	if err != nil || original != syscall.Getpgrp() {
		return noop
	}
	if err := syscall.Setpgid(0, 0); err != nil {
		return noop
	}
	// A process outside the foreground group that sets the foreground group
	// gets SIGTTOU, which would stop it.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	if err := tcsetpgrp(stdin, syscall.Getpid()); err != nil {
		_ = syscall.Setpgid(0, original)
		return noop
	}
	// Ctrl-Z would stop the demo while make waits for it, and no shell
	// knows this group to continue it: the terminal would hang. Caught, not
	// ignored, so that the processes the demo starts keep the default.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTSTP)
	return func() {
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		_ = tcsetpgrp(stdin, original)
	}
}

func tcgetpgrp(fd int) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

func tcsetpgrp(fd, pgrp int) error {
	p := int32(pgrp)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}
