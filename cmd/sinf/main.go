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
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime/kernels"
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
	if err := kernels.EnvError(); err != nil { // a mistyped SINF_KERNELS is not a silent fallback
		fmt.Fprintln(os.Stderr, "sinf:", err)
		os.Exit(2)
	}
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sinf:", err)
		os.Exit(1)
	}
}

// newApp builds the command tree (tests run it in-process).
func newApp() *cli.App {
	app := &cli.App{
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
	runcmd.Strict(app)
	return app
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

// dataHint adds to a missing data file's error where the data was looked
// for and where it is: the repository ships samples of only three built-in
// tasks.
func dataHint(err error, dir string) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if abs, aerr := filepath.Abs(dir); aerr == nil {
		dir = abs
	}
	return fmt.Errorf("%w (data folder %s: give --data-dir, or set $SINF_DATA to, a folder with the full data, such as the shared data beside a checkout; the repository's testdata/data holds only tinystories, wikitext2 and xsum)", err, dir)
}

// intFlag is an integer flag's lower bound and what its smallest value
// means, for checkInts.
type intFlag struct {
	name  string
	min   int
	means string // "" or, e.g., "0: all"
}

// checkInts refuses an integer flag below its bound before the command
// reads anything, in one form for every command: "--limit -1: want ≥ 0
// (0: all)".
func checkInts(c *cli.Context, flags ...intFlag) error {
	for _, f := range flags {
		if v := c.Int(f.name); v < f.min {
			if f.means != "" {
				return fmt.Errorf("--%s %d: want ≥ %d (%s)", f.name, v, f.min, f.means)
			}
			return fmt.Errorf("--%s %d: want ≥ %d", f.name, v, f.min)
		}
	}
	return nil
}

// checkOutFile checks, before the work, that an --out file can be written:
// the path is not a folder and a file can be created beside it (the output
// is written to a temporary file there, then renamed).
func checkOutFile(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--out %s is a folder; give a file name", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".sinf-write-check-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("--out %s: cannot create a file in %s: %w", path, dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
