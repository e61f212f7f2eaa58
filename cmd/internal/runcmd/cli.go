package runcmd

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/format"
)

// Strict sets up an app's command line as a careful user expects: an unknown
// flag, a bad flag value or a missing required flag returns one error that
// names the flag and points at the command's --help, and prints no help (the
// library's default prints the whole help to stdout, into a --json pipe, and
// the error twice); --version prints the tool version (format.ToolVersion)
// and the .sinf format version. It applies to the app's root and every
// command under it; call it after the command tree is built.
func Strict(app *cli.App) {
	app.Version = strings.TrimPrefix(format.ToolVersion, "sinf ")
	cli.VersionPrinter = func(c *cli.Context) {
		fmt.Fprintf(c.App.Writer, "%s %s (.sinf format version %d)\n", c.App.Name, c.App.Version, format.Version)
	}
	app.OnUsageError = usageError(app.Name)
	app.Before = chainRequired(app.Name, app.Flags, app.Before)
	for _, f := range app.Flags {
		unrequire(f)
	}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			name := prefix + " " + cmd.Name
			cmd.OnUsageError = usageError(name)
			cmd.Before = chainRequired(name, cmd.Flags, cmd.Before)
			for _, f := range cmd.Flags {
				unrequire(f)
			}
			walk(name, cmd.Subcommands)
		}
	}
	walk(app.Name, app.Commands)
}

// usageError rewrites the flag package's error in the --flag spelling the
// help uses, and says where the flags are listed.
func usageError(name string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		msg := err.Error()
		for _, r := range []struct{ old, new string }{
			{"flag provided but not defined: -", "unknown flag --"},
			{"flag needs an argument: -", "flag needs a value: --"},
			{" for flag -", " for flag --"},
			{": parse error", ": not a number"},
		} {
			if i := strings.Index(msg, r.old); i >= 0 && !strings.Contains(msg, r.old+"-") {
				msg = msg[:i] + r.new + msg[i+len(r.old):]
			}
		}
		return fmt.Errorf("%s (%s --help lists the flags)", msg, name)
	}
}

// chainRequired checks the flags marked Required before the command's own
// Before hook (the library's check prints the help to stdout first).
func chainRequired(name string, flags []cli.Flag, next cli.BeforeFunc) cli.BeforeFunc {
	var required []string
	for _, f := range flags {
		if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
			required = append(required, f.Names()[0])
		}
	}
	return func(c *cli.Context) error {
		var missing []string
		for _, n := range required {
			if !c.IsSet(n) {
				missing = append(missing, "--"+n)
			}
		}
		switch len(missing) {
		case 0:
		case 1:
			return fmt.Errorf("%s is required (%s --help lists the flags)", missing[0], name)
		default:
			return fmt.Errorf("%s and %s are required (%s --help lists the flags)", strings.Join(missing[:len(missing)-1], ", "), missing[len(missing)-1], name)
		}
		if next != nil {
			return next(c)
		}
		return nil
	}
}

// unrequire clears a flag's Required mark once chainRequired has taken over
// its check.
func unrequire(f cli.Flag) {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Required = false
	case *cli.IntFlag:
		f.Required = false
	case *cli.Float64Flag:
		f.Required = false
	case *cli.Uint64Flag:
		f.Required = false
	case *cli.BoolFlag:
		f.Required = false
	case *cli.StringSliceFlag:
		f.Required = false
	}
}
