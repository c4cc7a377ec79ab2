// Command kubectl is the Kubernetes command-line client.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // exec and OIDC credential plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// klog's verbosity is needed while the command is being built (kuberc, plugins),
	// before cobra parses the flags.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck // verbosity is best effort here
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
