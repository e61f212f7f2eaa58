// Command sinf-run is the small device runtime: it memory-maps a .sinf file
// and generates text with SelectInfer's selective FFN computation. It links
// only the format, runtime and tokenizer packages.
//
//	sinf-run --model FILE.sinf --prompt TEXT [--max-tokens N] [--phi 0.4] [--alpha 0.2]
//	         [--mode selectinfer|dense|coreinfer|gatefirst] [--threads N] [--json]
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
)

func main() {
	app := &cli.App{
		Name:            "sinf-run",
		Usage:           "run a .sinf sparse checkpoint (SelectInfer) on this device",
		UsageText:       "sinf-run --model FILE.sinf --prompt TEXT [options]",
		Flags:           runcmd.Flags(),
		Action:          runcmd.Action(runcmd.OpenSinf),
		HideHelpCommand: true,
	}
	runcmd.Strict(app)
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sinf-run:", err)
		os.Exit(1)
	}
}
