// Command gic-pause is the process of a pod sandbox's infrastructure container: it holds
// the pod's namespaces open and does nothing else. As PID 1 of the sandbox it exits 0 on
// SIGINT or SIGTERM, and reaps the children it inherits (processes of the pod's other
// containers whose parents died, when the containers share the sandbox's PID namespace).
// The local node's image store gets it as an image built on this machine, so no registry
// is needed for the sandbox (tests/e2e/real_node.py).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("gic-pause")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "gic-pause: warning: not running as PID 1")
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "gic-pause: %v, exiting\n", sig)
			return
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
