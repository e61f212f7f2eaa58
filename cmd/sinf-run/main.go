// Command sinf-run is the small device runtime: it memory-maps a .sinf file
// and generates text with SelectInfer's selective FFN computation, serves it
// over an OpenAI-compatible HTTP API, or chats with it. It links only the
// format, runtime and tokenizer packages (and the chat template engine).
//
//	sinf-run --model FILE.sinf --prompt TEXT [--max-tokens N] [--phi 0.4] [--alpha 0.2]
//	         [--mode selectinfer|dense|coreinfer|gatefirst] [--threads N] [--json]
//	sinf-run serve --model FILE.sinf [--port 8080] [--parallel N]   (OpenAI-compatible HTTP API)
//	sinf-run chat --model FILE.sinf [--system TEXT]                 (interactive chat)
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/cmd/internal/serve"
	"github.com/selectinfer/sinf/runtime/kernels"
)

func newApp() *cli.App {
	// --model is required of a run, but not on the top level, where it
	// would be asked of the subcommands too.
	flags := runcmd.Flags()
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "model" {
			sf.Required = false
		}
	}
	run := runcmd.Action(runcmd.OpenSinf)
	return &cli.App{
		Name:      "sinf-run",
		Usage:     "run a .sinf sparse checkpoint (SelectInfer) on this device",
		UsageText: "sinf-run --model FILE.sinf --prompt TEXT [options]\nsinf-run serve --model FILE.sinf [options]\nsinf-run chat --model FILE.sinf [options]",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			if !c.IsSet("model") {
				return errors.New(`Required flag "model" not set (or run a command: serve, chat)`)
			}
			return run(c)
		},
		Commands:        []*cli.Command{serve.Command(), serve.ChatCommand()},
		HideHelpCommand: true,
	}
}

func main() {
	if err := kernels.EnvError(); err != nil { // a mistyped SINF_KERNELS is not a silent fallback
		fmt.Fprintln(os.Stderr, "sinf-run:", err)
		os.Exit(2)
	}
	app := newApp()
	runcmd.Strict(app)
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sinf-run:", err)
		os.Exit(1)
	}
}
