package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/convert/dataset"
)

// splitFlags are --split and --offset of profile and eval: which part of a
// built-in dataset a command reads (dataset.Split: profiling reads the first
// half, evaluation the second, so that a profile-then-evaluate run never
// scores text it profiled).
func splitFlags(def dataset.Split) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "split", Usage: fmt.Sprintf("part of a built-in dataset: profile (the first half of its examples), eval (the second half) or all (default: %s; a prompt file: all)", def)},
		&cli.IntFlag{Name: "offset", Usage: "skip the first N examples of the split (texts, for perplexity)"},
	}
}

// selection returns the dataset.Selection of --split, --offset and --limit
// for the dataset named name: the default split def for a built-in dataset,
// the whole file for a prompt file.
func selection(c *cli.Context, name string, def dataset.Split) (dataset.Selection, error) {
	sel := dataset.Selection{Split: dataset.SplitAll, Offset: c.Int("offset"), Limit: c.Int("limit")}
	if _, err := dataset.Lookup(name); err == nil {
		sel.Split = def
	}
	if s := c.String("split"); s != "" {
		sp, err := dataset.ParseSplit(s)
		if err != nil {
			return sel, fmt.Errorf("--split: %w", err)
		}
		sel.Split = sp
	}
	if sel.Offset < 0 {
		return sel, fmt.Errorf("--offset %d: want ≥ 0", sel.Offset)
	}
	return sel, nil
}
