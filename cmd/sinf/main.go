// Command sinf is the desktop toolchain of SelectInfer: profile neurons on
// task prompts, merge score files, convert a HuggingFace checkpoint into a
// slim .sinf file, inspect and verify it, and run it.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/format"
)

func main() {
	// An interrupted command leaves no partial output: temporary files are
	// removed before exiting (finished files were renamed into place).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		format.RemoveTemps()
		fmt.Fprintf(os.Stderr, "sinf: %v: stopped, no output written\n", s)
		os.Exit(130)
	}()
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sinf:", err)
		os.Exit(1)
	}
}

// newApp builds the command tree (tests run it in-process).
func newApp() *cli.App {
	return &cli.App{
		Name:  "sinf",
		Usage: "turn HuggingFace LLM checkpoints into pre-sliced sparse checkpoints (.sinf) and run them",
		Commands: []*cli.Command{
			runCommand(),
			tokenizeCommand(),
			chatTemplateCommand(),
			profileCommand(),
			mergeCommand(),
			overlapCommand(),
			convertCommand(),
			inspectCommand(),
			verifyCommand(),
			evalCommand(),
			studyCommand(),
			synthCommand(),
			benchCommand(),
		},
		HideHelpCommand: true,
	}
}

// showProgress reports whether a command draws progress bars: not with
// --quiet, and only when stderr is a terminal (a log file or a pipe would
// get every frame of the bar).
func showProgress(c *cli.Context) bool {
	if c.Bool("quiet") {
		return false
	}
	f, ok := c.App.ErrWriter.(*os.File)
	if !ok || f == nil {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// plural returns "1 file", "2 files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// dataHint adds to a missing data file's error where the data is: the
// repository ships samples of only three built-in tasks.
func dataHint(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (testdata/data has only tinystories, wikitext2 and xsum; give --data-dir a full copy, such as ../shared/data)", err)
	}
	return err
}
