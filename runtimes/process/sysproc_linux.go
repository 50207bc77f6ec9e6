package process

import "syscall"

func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig keeps user code from outliving a crashed Runtime Server.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
